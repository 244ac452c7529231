"""Where the console's status comes from, and where its actions go.

`RunnerSource` is the live one: it subscribes to the runner's socket (through
`runner.daemon.async_client.AsyncClient`, which reconnects by itself), takes one full state and then
applies the runner's deltas, so a second costs what changed. `SnapshotSource` serves a recorded
status snapshot (screenshots, snapshot tests, a status file saved with `campaign status --json`):
it refuses every action, since no runner stands behind it. The app asks `update()` once a tick; it
schedules the next tick only when the last one has finished.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runner.daemon.status_types import apply_delta, index_runs


class SourceError(Exception):
    """An action was refused, or the source could not answer (the message is for the user)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.reason = message
        self.hint = hint  # what fixes it, shown first where space is short


class SourceDown(SourceError):
    """No runner answers right now (the console says so and keeps trying)."""


@dataclass
class StatusUpdate:
    """The state as it is now, and the runs that changed since the last update (None: take all
    of them, a full state arrived)."""

    snapshot: dict
    changed: list[dict] | None


class StatusSource(Protocol):
    description: str

    async def update(self) -> StatusUpdate: ...

    async def request(self, op: str, **args: Any) -> Any: ...

    async def close(self) -> None: ...


class RunnerSource:
    """The runner of the campaign folder `root`, over its socket."""

    def __init__(self, root: str | Path, *, timeout: float = 10.0, retry_seconds: float = 1.0) -> None:
        from runner.daemon.async_client import AsyncClient

        self.root = Path(root)
        self.description = f"runner of {self.root}"
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        # a str, not a Path: `paths_for` reads a `.root` attribute, and every Path has one ("/")
        self._client = AsyncClient(str(self.root), timeout=timeout)
        self.state: dict | None = None
        self._index: dict[str, int] = {}
        self._pending: list[dict] = []  # deltas received, applied at the next update()
        self._next_state: dict | None = None  # a full state received, taken at the next update()
        self._down: SourceDown | None = None
        self._news = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.deltas = 0  # deltas applied (tests and benchmarks read it)

    async def _follow(self) -> None:
        """The subscription, for as long as the console lives: a full state on each (re)connect,
        then deltas, kept until the next `update()` applies them (the app's state changes only
        at its own ticks)."""
        async for msg in self._client.watch(self.retry_seconds):
            kind, data = msg.get("event"), msg.get("data")
            if kind == "status" and isinstance(data, dict):
                self._next_state = data
                self._pending.clear()
                self._down = None
            elif kind == "delta" and isinstance(data, dict):
                self._pending.append(data)
            elif kind == "runner" and isinstance(data, dict) and not data.get("up"):
                self._down = SourceDown(str(data.get("reason") or data.get("error")), hint=data.get("hint"))
            else:
                continue
            self._news.set()

    def start(self) -> None:
        """Subscribe now (the app calls it as it mounts): the runner builds and sends its full
        state while the console is still drawing its first screen."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._follow())

    async def update(self) -> StatusUpdate:
        self.start()
        if self.state is None and self._next_state is None and self._down is None:
            self._news.clear()
            try:
                await asyncio.wait_for(self._news.wait(), self.timeout)
            except TimeoutError:
                raise SourceDown(
                    f"the runner of {self.root} did not send its state within {self.timeout:g} s"
                ) from None
        if self._down is not None:
            raise self._down
        full = self._next_state is not None
        if self._next_state is not None:
            self.state, self._next_state = self._next_state, None
            self._index = index_runs(self.state)
        assert self.state is not None
        changed: dict[str, dict] = {}
        pending, self._pending = self._pending, []
        for delta in pending:
            if delta.get("since") != self.state.get("seq", 0):
                continue  # not a successor of this state (cannot happen on one ordered stream)
            for rid in apply_delta(self.state, self._index, delta):
                changed[rid] = self.state["runs"][self._index[rid]]
            self.deltas += 1
        return StatusUpdate(self.state, None if full else list(changed.values()))

    async def status(self) -> dict:
        return await self.request("status")

    async def request(self, op: str, **args: Any) -> Any:
        from runner.campaign.errors import CampaignError, RunnerUnavailable
        from runner.daemon.client import RequestFailed

        try:
            return await self._client.request(op, **args)
        except RunnerUnavailable as exc:
            raise SourceDown(exc.reason, hint=exc.hint) from None
        except RequestFailed as exc:
            raise SourceError(str(exc), hint=exc.hint) from None
        except CampaignError as exc:
            raise SourceError(str(exc)) from None
        except (TimeoutError, OSError, ValueError) as exc:
            raise SourceDown(f"the runner's socket failed: {exc}") from None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._client.close()


class SnapshotSource:
    """A fixed status snapshot; `replace()` swaps in the next one (tests step through time)."""

    def __init__(self, snapshot: dict, *, description: str = "recorded snapshot") -> None:
        self.snapshot = snapshot
        self.description = description
        self.requests: list[tuple[str, dict]] = []
        self.down: str | None = None  # set to a reason to act as an unreachable runner
        self.down_hint: str | None = None  # and what fixes it, as the live source says it

    def replace(self, snapshot: dict) -> None:
        self.snapshot = snapshot

    async def status(self) -> dict:
        if self.down:
            raise SourceDown(self.down, hint=self.down_hint)
        return self.snapshot

    async def update(self) -> StatusUpdate:
        return StatusUpdate(await self.status(), None)

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
