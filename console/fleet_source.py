"""The status source of a campaign over several hosts: every host's runner through
`runner.daemon.fleet` (one ControlMaster and one forwarded socket per host, kept between polls
and made again after a partition).

Its snapshot has the shape the console already draws: the runs of every host, each named
`HOST/RUN`; the bundle of the host whose window ends first in the header; and `hosts`, one
entry per host (bundle, GPUs, slots, or unreachable since when) for the hosts panel. Actions go
to the run's host; one sent to a host that does not answer is refused with the reason. After the
first poll each host sends only what changed (`runner.daemon.fleet_poll`), and the console is handed
the changed runs, as from one runner's deltas.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

from console.source import SourceDown, SourceError, StatusUpdate


def console_run(run: dict) -> dict:
    """A host's run (tagged with its host and key) as a row of the console: its id is `HOST/RUN`."""
    return {**run, "id": run.get("key") or f"{run.get('host')}/{run.get('id')}", "run_dir": None}


def console_head(merged: dict) -> dict:
    """The campaign-wide parts of a merged status, in the single-host snapshot's shape (no runs)."""
    hosts = merged.get("hosts") or []
    with_bundle = [h for h in hosts if h.get("bundle")]
    urgent = min(with_bundle, key=lambda h: h["bundle"].get("remaining_seconds") or math.inf, default=None)
    gpus = [{**g, "host": h["host"]} for h in hosts for g in (h.get("gpus") or [])]
    queue = [f"{h['host']}/{v}" for h in hosts for v in (h.get("queue") or [])]
    answering = [h for h in hosts if h.get("runner")]
    return {
        "now": merged.get("now"),
        "campaign": merged.get("campaign") or {},
        "bundle": dict(urgent["bundle"], plan=f"{urgent['bundle'].get('plan', '')} ({urgent['host']})")
        if urgent
        else {},
        "hosts": hosts,
        "gpus": gpus,
        "queue": queue,
        "runner": {"hosts": len(answering)} if answering else None,
        "placement": merged.get("placement") or {},
    }


def console_snapshot(merged: dict) -> dict:
    """A merged `status --json` from the user's side, in the single-host snapshot's shape."""
    return {**console_head(merged), "runs": [console_run(r) for r in merged["runs"]]}


class FleetSource:
    """Every declared host of `campaign`, polled together; one call at a time. After the first
    poll each host sends only what changed (`runner.daemon.fleet_poll`), and the console gets the
    changed runs as it does from one runner's deltas."""

    def __init__(self, campaign: Any) -> None:
        from runner.daemon.fleet import Fleet
        from runner.daemon.fleet_poll import FleetPoller

        self.fleet = Fleet(campaign)
        self.poller = FleetPoller(self.fleet)
        self.description = f"{len(campaign.hosts)} hosts of {campaign.name}"
        self._lock = threading.Lock()
        self._runs: list[dict] = []  # the console's rows, in the merged order
        self._index: dict[str, int] = {}  # row id (HOST/RUN) -> position in _runs

    def _poll(self) -> StatusUpdate:
        with self._lock:
            poll = self.poller.poll()
        snap = console_head(poll.head)
        if poll.runs is not None:  # taken whole: the first poll, or a host went, came or restarted
            self._runs = [console_run(r) for r in poll.runs]
            self._index = {r["id"]: i for i, r in enumerate(self._runs)}
            return StatusUpdate({**snap, "runs": self._runs}, None)
        changed = [console_run(r) for r in poll.changed]
        for row in changed:
            pos = self._index.get(row["id"])
            if pos is None:
                self._index[row["id"]] = len(self._runs)
                self._runs.append(row)
            else:
                self._runs[pos] = row
        return StatusUpdate({**snap, "runs": self._runs}, changed)

    @staticmethod
    def _check(snap: dict) -> None:
        if snap["runner"] is None and snap["hosts"]:
            raise SourceDown("no host's runner answers: " + "; ".join(str(h.get("error")) for h in snap["hosts"]))

    async def status(self) -> dict:
        """Every host's state, whole (the first poll; later ones bring it up to date)."""
        update = await asyncio.to_thread(self._poll)
        self._check(update.snapshot)
        return update.snapshot

    async def update(self) -> StatusUpdate:
        """What changed on every host since the last poll (whole the first time, and whenever a
        host goes, comes back or restarts its runner)."""
        update = await asyncio.to_thread(self._poll)
        self._check(update.snapshot)
        return update

    def _request(self, op: str, args: dict[str, Any]) -> Any:
        from runner.campaign.errors import CampaignError, RunnerUnavailable
        from runner.daemon.client import RequestFailed
        from runner.daemon.fleet import HostUnreachable

        with self._lock:
            try:
                if op == "start":
                    host, out = self.fleet.start(str(args["variant"]))
                    return {**out, "run": f"{host}/{out['run']}"}
                if "run" in args:
                    host, rid = self.fleet.route(str(args["run"]))
                    out = self.fleet.request(host, op, **{**args, "run": rid})
                    return {**out, "run": f"{host}/{out.get('run', rid)}"} if isinstance(out, dict) else out
            except (HostUnreachable, CampaignError, RequestFailed, RunnerUnavailable) as exc:
                raise SourceError(str(exc)) from None
        raise SourceError(f"{op} goes to one host's runner: open the console on that host for it")

    async def request(self, op: str, **args: Any) -> Any:
        return await asyncio.to_thread(self._request, op, args)

    async def close(self) -> None:
        await asyncio.to_thread(self.fleet.close)
