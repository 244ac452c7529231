"""Where the console's status comes from, and where its actions go.

`RunnerSource` is the live one: the runner's socket through `runner.daemon.client.AsyncClient`, which
re-opens a lost connection by itself, so a restarted runner is picked up on the next poll.
`SnapshotSource` serves a recorded status snapshot (screenshots, snapshot tests, a status file
saved with `campaign status --json`): it refuses every action, since no runner stands behind it.
The app polls `status()`; it schedules the next poll only when the last one has finished.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Protocol


class SourceError(Exception):
    """An action was refused, or the source could not answer (the message is for the user)."""


class SourceDown(SourceError):
    """No runner answers right now (the console says so and keeps trying)."""


class StatusSource(Protocol):
    description: str

    async def status(self) -> dict: ...

    async def request(self, op: str, **args: Any) -> Any: ...

    async def close(self) -> None: ...


class RunnerSource:
    """The runner of the campaign folder `root`, over its socket."""

    def __init__(self, root: str | Path, *, timeout: float = 10.0) -> None:
        from runner.daemon.client import AsyncClient

        self.root = Path(root)
        self.description = f"runner of {self.root}"
        # a str, not a Path: `paths_for` reads a `.root` attribute, and every Path has one ("/")
        self._client = AsyncClient(str(self.root), timeout=timeout)

    async def status(self) -> dict:
        return await self.request("status")

    async def request(self, op: str, **args: Any) -> Any:
        from runner.campaign.errors import CampaignError, RunnerUnavailable
        from runner.daemon.client import RequestFailed

        try:
            return await self._client.request(op, **args)
        except RunnerUnavailable as exc:
            raise SourceDown(str(exc)) from None
        except (RequestFailed, CampaignError) as exc:
            raise SourceError(str(exc)) from None
        except (TimeoutError, OSError, ValueError) as exc:
            raise SourceDown(f"the runner's socket failed: {exc}") from None

    async def close(self) -> None:
        await self._client.close()


class SnapshotSource:
    """A fixed status snapshot; `replace()` swaps in the next one (tests step through time)."""

    def __init__(self, snapshot: dict, *, description: str = "recorded snapshot") -> None:
        self.snapshot = snapshot
        self.description = description
        self.requests: list[tuple[str, dict]] = []
        self.down: str | None = None  # set to a reason to act as an unreachable runner

    def replace(self, snapshot: dict) -> None:
        self.snapshot = snapshot

    async def status(self) -> dict:
        if self.down:
            raise SourceDown(self.down)
        return self.snapshot

    async def request(self, op: str, **args: Any) -> Any:
        self.requests.append((op, args))
        if op == "status":
            return await self.status()
        if op == "run_detail":
            return run_detail_from_folder(self.snapshot, str(args.get("run")))
        raise SourceError(f"{self.description}: no runner behind it to {op}")

    async def close(self) -> None:
        return None


def run_detail_from_folder(snapshot: dict, run_id: str) -> dict:
    """The `run_detail` answer rebuilt from the run's folder (recorded views only: the live
    console asks the runner)."""
    row = next((r for r in snapshot.get("runs", []) if r.get("id") == run_id), None)
    if row is None:
        raise SourceError(f"no run {run_id!r} in the snapshot")
    folder = Path(row.get("run_dir") or "")
    config: dict = {}
    try:
        config = tomllib.loads((folder / "run.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    checkpoints = []
    for sidecar in sorted((folder / "checkpoints").glob("*.verify.json")):
        try:
            checkpoints.append(json.loads(sidecar.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    try:
        lines = (folder / "output.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    return {
        "run": row,
        "config": config,
        "rules": config.get("rule", []),
        "checkpoints": checkpoints,
        "log_tail": lines[-50:],
        "events": [],
    }
