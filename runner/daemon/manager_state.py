"""The run manager's shared state (slots, live runs, the ledger) and the errors its requests raise;
the base of the manager's parts (queueing, ending, recovery, requests).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from runner.campaign.objects import Campaign
from runner.campaign.placeholders import expand_opt
from runner.closing import pilot
from runner.closing.pilot import LaunchHold
from runner.daemon import containment
from runner.daemon.slots import SlotPlan
from runner.daemon.status import frozen_config
from runner.daemon.watcher import READ_EVERY_SECONDS, RunWatch
from runner.ledger import queries
from runner.ledger.records import RunRecord
from runner.ledger.store import Ledger
from runner.supervision import cgroups, proctree

GRACE_ENV = "CAMPAIGN_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 30.0


class RequestError(Exception):
    """A request the runner refuses; `code` "bad_input" when it was the user's mistake."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Active:
    """A launched run the manager watches: its supervisor, its slots, its watch on the run folder."""

    run_id: str
    attempt: int
    slot_keys: list[str]
    watch: RunWatch
    popen: subprocess.Popen | None = None  # our child; None when re-adopted
    supervisor: Any = None  # psutil.Process, identity checked
    extra: dict = field(default_factory=dict)
    unrecorded: tuple[dict, dict] | None = None  # launched, but the ledger could not be written yet

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        p = self.supervisor
        if p is None:
            return False
        return not proctree.gone(p)


class ManagerBase:
    """What every part of the run manager reads: the campaign, the ledger, the slots, the live runs."""

    def __init__(
        self,
        campaign: Campaign,
        ledger: Ledger,
        slots: SlotPlan,
        *,
        grace_seconds: float | None = None,
        tracking: cgroups.Tracking | None = None,
    ) -> None:
        self.campaign = campaign
        self.ledger = ledger
        self.slots = slots
        if grace_seconds is None:
            try:
                grace_seconds = float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_SECONDS))
            except ValueError:
                grace_seconds = DEFAULT_GRACE_SECONDS
        self.grace = grace_seconds
        self.active: dict[str, Active] = {}
        self.started_at = time.time()  # this runner's start (the pilot's wait may have run out before)
        # no run was queued at the last look, and the ledger has written no run row since (a run
        # is queued only through a ledger write): `schedule` then skips its query, 4 times a second
        self.queue_empty = False
        ledger.run_listeners.append(self._run_written)
        self.wrapup_hold = False  # True from the wrap-up's start on: nothing new launches
        self.busy: dict[str, str] = {}  # slot key -> run id
        self.hold: LaunchHold = pilot.OPEN  # the pilot's hold, as the last launch pass found it
        self.faults = containment.Recorder(ledger.event)
        self.draining: dict[str, tuple[RunWatch, threading.Thread]] = {}  # ended, an orphan being stopped
        # each run's processes in a cgroup of their own where the host allows it (the runner detects)
        self.tracking = tracking or cgroups.Tracking(cgroups.Mode.NONE, reason="not detected")
        self.cgroups_stopping: set[str] = set()  # run cgroups a thread is emptying

    # -- helpers -------------------------------------------------------------------------------
    def _run_written(self, run_id: str, metrics_only: bool) -> None:
        if not metrics_only:
            self.queue_empty = False

    def _variant_table(self, run: RunRecord) -> dict:
        return frozen_config(run.run_dir).get("variant", {})

    def free_slots(self) -> list[int]:
        return [i for i, k in enumerate(self.slots.keys) if k not in self.busy]

    def _watch(self, run: RunRecord) -> RunWatch:
        vt = self._variant_table(run)
        return RunWatch(
            self.ledger,
            run,
            root=self.campaign.root,
            metrics_regex=vt.get("metrics_regex"),
            metrics_format=vt.get("metrics_format"),
            checkpoint_glob=expand_opt(vt.get("checkpoint_glob"), run.id),
            offset=queries.metrics_offset(self.ledger.conn, run.id),
            read_every=READ_EVERY_SECONDS,
        )
