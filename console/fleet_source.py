"""The status source of a campaign over several hosts: every host's runner through
`runner.daemon.fleet` (one ControlMaster and one forwarded socket per host, kept between polls
and made again after a partition).

Its snapshot has the shape the console already draws: the runs of every host, each named
`HOST/RUN`; the bundle of the host whose window ends first in the header; and `hosts`, one
entry per host (bundle, GPUs, slots, or unreachable since when) for the hosts panel. Actions go
to the run's host; one sent to a host that does not answer is refused with the reason.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

from console.source import SourceDown, SourceError, StatusUpdate


def console_snapshot(merged: dict) -> dict:
    """A merged `status --json` from the user's side, in the single-host snapshot's shape."""
    hosts = merged.get("hosts") or []
    with_bundle = [h for h in hosts if h.get("bundle")]
    urgent = min(with_bundle, key=lambda h: h["bundle"].get("remaining_seconds") or math.inf, default=None)
    runs = [{**r, "id": r.get("key") or f"{r.get('host')}/{r.get('id')}", "run_dir": None} for r in merged["runs"]]
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
        "runs": runs,
        "gpus": gpus,
        "queue": queue,
        "runner": {"hosts": len(answering)} if answering else None,
        "placement": merged.get("placement") or {},
    }


class FleetSource:
    """Every declared host of `campaign`, polled together; one call at a time."""

    def __init__(self, campaign: Any) -> None:
        from runner.daemon.fleet import Fleet

        self.fleet = Fleet(campaign)
        self.description = f"{len(campaign.hosts)} hosts of {campaign.name}"
        self._lock = threading.Lock()

    def _status(self) -> dict:
        with self._lock:
            return console_snapshot(self.fleet.status())

    async def status(self) -> dict:
        snap = await asyncio.to_thread(self._status)
        if snap["runner"] is None and snap["hosts"]:
            raise SourceDown("no host's runner answers: " + "; ".join(str(h.get("error")) for h in snap["hosts"]))
        return snap

    async def update(self) -> StatusUpdate:
        """Every host's snapshot, whole, each time (deltas across SSH are not done yet)."""
        return StatusUpdate(await self.status(), None)

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
