"""A campaign over several hosts followed second by second (what the console does): each host's
state is held here and brought up to date with what changed since the last poll.

One `status` request a host a poll, carrying the `seq` and `epoch` of the state held: the runner
answers with the runs changed since (none, in an idle second) instead of its whole snapshot, so
what crosses SSH and what is merged follows what changed, not how many runs have ended. A host
answers with a whole snapshot the first time, after its runner restarted (another epoch) or when
it runs an older runner; a host that stops answering drops its state. Either makes the poll
whole: `runs` then lists every run, as `Fleet.status()` would.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from runner.daemon.fleet import Fleet, tagged
from runner.daemon.status_types import apply_delta, index_runs


@dataclass
class HostHeld:
    """One host's state as its runner last described it, and where that leaves off."""

    state: dict[str, Any]  # a decoded snapshot, deltas applied
    index: dict[str, int]  # run id -> position in state["runs"]
    epoch: str
    seq: int


@dataclass(frozen=True)
class FleetPoll:
    """`head`: `now`, `campaign`, `hosts`, `placement`, as in `Fleet.status()`. `runs`: every run
    (tagged with host and key) when the poll is whole, else None and `changed` holds the runs that
    changed since the last poll."""

    head: dict[str, Any]
    runs: list[dict[str, Any]] | None
    changed: list[dict[str, Any]]


@dataclass(frozen=True)
class _HostPoll:
    entry: dict[str, Any]
    whole: bool  # this host's runs were taken (or dropped) whole
    changed: list[dict[str, Any]]


class FleetPoller:
    """The hosts of one `Fleet`, polled together; each host's state held between polls."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.held: dict[str, HostHeld] = {}

    def poll(self) -> FleetPoll:
        names = list(self.fleet.links)
        with ThreadPoolExecutor(max_workers=len(names)) as pool:  # hosts answer side by side
            polls = list(pool.map(self._poll_host, names))
        # the held states are replaced here, on this thread, in the campaign's order of hosts
        self.held = {name: held for name, (_, held) in zip(names, polls, strict=True) if held is not None}
        head = self.fleet.head(time.time(), [p.entry for p, _ in polls])
        if any(p.whole for p, _ in polls):
            runs = [tagged(name, run) for name, held in self.held.items() for run in held.state.get("runs") or []]
            return FleetPoll(head, runs, [])
        return FleetPoll(head, None, [run for p, _ in polls for run in p.changed])

    def _poll_host(self, name: str) -> tuple[_HostPoll, HostHeld | None]:
        """One host's part of a poll, and its state from now on (None: none is held)."""
        held = self.held.get(name)
        args = {"since": held.seq, "epoch": held.epoch} if held is not None and held.epoch else {}
        entry, reply = self.fleet.host_status(name, **args)
        if reply is None:  # unreachable, or its runner is down: its runs are not listed
            return _HostPoll(entry, held is not None, []), None
        if held is not None and "since" in reply and reply.get("epoch") == held.epoch:
            ids = apply_delta(held.state, held.index, reply)
            held.seq = int(reply["seq"])
            return _HostPoll(entry, False, [tagged(name, held.state["runs"][held.index[rid]]) for rid in ids]), held
        fresh = HostHeld(reply, index_runs(reply), str(reply.get("epoch") or ""), int(reply.get("seq") or 0))
        return _HostPoll(entry, True, []), fresh
