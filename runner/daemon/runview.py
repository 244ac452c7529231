"""The runner's view of the runs, kept in memory and brought up to date by run id as the ledger
changes, so that what a second costs follows what changed, not how many runs have ended.

The ledger tells the view which runs it wrote (`Ledger.run_listeners`); `refresh()` re-reads those
runs alone, recomputes the rows of live runs (running, or with checkpoints waiting for their
verdict: their elapsed time, countdowns and waits move with the clock; their inputs are cached),
and gives every row that changed the next sequence number. A subscriber that has seen up to `seq` gets `delta(seq)`: the rows changed since, and the small
campaign-wide parts. A finished run's row changes no more, so it is sent once. The complete
snapshot (`snapshot()`, for the `status` op and a new subscriber) is the one place that walks
every run: it is what was asked for.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from runner.campaign.objects import Campaign
from runner.daemon.protocol import sanitize
from runner.daemon.slots import order_key
from runner.daemon.status import (
    bundle_info,
    campaign_info,
    gpu_info,
    pilot_info,
    retrieval_info,
    run_row,
    variant_infos,
)
from runner.daemon.status_types import Delta, RunRow, Snapshot, VariantInfo
from runner.ledger import store as L
from runner.ledger.records import RunRecord
from runner.ledger.states import RunState

PILOT_MAX_AGE_SECONDS = 60.0  # before the decision the pilot's re-estimate moves with the clock
# after the decision the pilot's status reads every run (seconds at 10,000 runs) for nothing new:
# it is recomputed only when one of these is recorded
PILOT_DECIDED_EVENTS = frozenset({"decision", "plan_frozen"})


class Inputs:
    """What one run's row is computed from (ledger rows), cached until the ledger writes that run."""

    __slots__ = ("run", "metrics", "progress", "checkpoints")

    def __init__(self, run: RunRecord, metrics: dict, progress: dict, checkpoints: list[dict]) -> None:
        self.run, self.metrics, self.progress, self.checkpoints = run, metrics, progress, checkpoints


class RunView:
    def __init__(
        self,
        campaign: Campaign,
        conn: sqlite3.Connection,
        *,
        nvml: Any | None = None,
        runner: Callable[[], dict] | None = None,
        slots: Callable[[], dict] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.campaign = campaign
        self.conn = conn
        self.nvml = nvml
        self._runner = runner or (lambda: {})
        self._slots = slots or (lambda: {})
        self.clock = clock
        self.seq = 0
        self.epoch = secrets.token_hex(6)  # a restarted runner counts `seq` anew: a new mark
        self.rows: dict[str, RunRow] = {}  # run id -> row, in the ledger's order
        self.pos: dict[str, int] = {}  # run id -> its place in that order
        self.inputs: dict[str, Inputs] = {}
        self.changed_at: OrderedDict[str, int] = OrderedDict()  # run id -> seq of its last change, oldest first
        # runs the ledger wrote, in the order written (new runs in ledger order) -> metric summary only
        self.dirty: dict[str, bool] = {}
        self.live: set[str] = set()  # rows that move with the clock: recomputed at every refresh
        self.queued: dict[str, RunRecord] = {}  # run id -> ledger row, for the queue's order
        self.runs_of: dict[str, list[str]] = {}
        self.variants: list[VariantInfo] = []
        self.variants_seq = 0
        self.events_dirty = True
        self.events: list[dict] = []
        self.retrieval: Any = None
        self.pilot: Any = None
        self._pilot_at = -1e18
        self.head: tuple = ()  # the campaign-wide parts as last published (without the clock)
        self.head_seq = 0
        self.row_builds = 0  # rows recomputed (tests count them)
        self._now = 0.0
        self._bundle = bundle_info(campaign, clock())
        self._gpus: list[dict] = []
        self._nvml_error: str | None = None
        self.load()

    # -- in ---------------------------------------------------------------------------------------
    def touch(self, run_id: str, metrics_only: bool = False) -> None:
        """The ledger wrote this run (Ledger.run_listeners); `metrics_only`: only its metric
        summary (a batch of metric lines), so its run row and checkpoints need no new read."""
        self.dirty[run_id] = self.dirty.get(run_id, True) and metrics_only

    def on_event(self, ev: dict) -> None:
        """A ledger event (Ledger.listeners): the last-events list is stale, and the pilot's
        status too, unless the decision is taken and this event cannot change it."""
        self.events_dirty = True
        if not self._pilot_decided() or ev.get("kind") in PILOT_DECIDED_EVENTS:
            self._pilot_at = -1e18

    def _pilot_decided(self) -> bool:
        return isinstance(self.pilot, dict) and self.pilot.get("state") == "decided"

    def load(self) -> None:
        """Everything from the ledger, once (at start): the only full read."""
        now = self.clock()
        runs = L.all_runs(self.conn)
        metrics, progress = L.metric_last(self.conn), L.progress(self.conn)
        ckpts: dict[str, list[dict]] = {}
        for c in L.checkpoints(self.conn):
            ckpts.setdefault(c["run_id"], []).append(c)
        for r in runs:
            rid = r.id
            self.inputs[rid] = Inputs(r, metrics.get(rid, {}), progress.get(rid, {}), ckpts.get(rid, []))
            self._place(rid, now)
        self.dirty.clear()
        self._refresh_variants()
        self._refresh_head(now)

    # -- keeping up -------------------------------------------------------------------------------
    def _read(self, rid: str, metrics_only: bool = False) -> bool:
        """Re-read one run's inputs (only its metric summary when that is all that was written)."""
        old = self.inputs.get(rid)
        run = old.run if metrics_only and old is not None else L.get_run(self.conn, rid)
        if run is None:
            return False
        self.inputs[rid] = Inputs(
            run,
            L.metric_last(self.conn, rid).get(rid, {}),
            L.progress(self.conn, rid).get(rid, {}),
            old.checkpoints if metrics_only and old is not None else L.checkpoints(self.conn, rid),
        )
        return True

    def _place(self, rid: str, now: float) -> bool:
        """Recompute one row from its inputs; True (and a new seq) when it changed."""
        inp = self.inputs[rid]
        row = run_row(inp.run, self.campaign, inp.metrics, inp.progress, inp.checkpoints, now)
        self.row_builds += 1
        state = inp.run.state
        # rows that move with the clock: running, an attempt still ending, a verdict awaited
        ending = state in (RunState.ABORTED, RunState.STOPPED) and not inp.run.ended_at
        live = state == RunState.RUNNING or ending or bool(row.verify_waiting)
        (self.live.add if live else self.live.discard)(rid)
        if state == RunState.QUEUED:
            self.queued[rid] = inp.run
        else:
            self.queued.pop(rid, None)
        old = self.rows.get(rid)
        if old is not None and old == row:
            return False
        if old is None:
            self.pos[rid] = len(self.pos)
            self.runs_of.setdefault(row.variant, []).append(rid)
            self.variants_seq = -1  # stale: rebuilt below
        self.rows[rid] = row
        self.seq += 1
        self.changed_at[rid] = self.seq
        self.changed_at.move_to_end(rid)
        return True

    def refresh(self) -> int:
        """Bring the view up to date; returns the number of rows that changed. Costs the runs the
        ledger wrote plus the live ones (recomputed from cached inputs), never the others."""
        now = self.clock()
        self._now = now
        changed = 0
        dirty, self.dirty = self.dirty, {}
        for rid, metrics_only in dirty.items():
            if self._read(rid, metrics_only):
                changed += self._place(rid, now)
        for rid in [r for r in self.live if r not in dirty]:
            changed += self._place(rid, now)
        if self.variants_seq < 0:
            self._refresh_variants()
        self._refresh_head(now)
        return changed

    def _refresh_variants(self) -> None:
        self.variants = variant_infos(self.campaign, self.runs_of)
        self.seq += 1
        self.variants_seq = self.seq

    def _refresh_head(self, now: float) -> None:
        if self.events_dirty:
            self.events = sanitize(L.events(self.conn, limit=20))
            self.retrieval = retrieval_info(self.conn)
            self.events_dirty = False
        if self._pilot_at < -1e17 or (not self._pilot_decided() and now - self._pilot_at >= PILOT_MAX_AGE_SECONDS):
            self.pilot = pilot_info(self.campaign, self.conn)
            self._pilot_at = now
        self._bundle = bundle_info(self.campaign, now)
        self._gpus, self._nvml_error = gpu_info(self.nvml)
        head = (
            self._gpus,
            self._nvml_error,
            self._slots(),
            self._runner(),
            self.queue(),
            self.pilot,
            self.events,
            self.retrieval,
            self._bundle.warning,
        )
        if head != self.head:
            self.head = head
            self.seq += 1
            self.head_seq = self.seq

    def queue(self) -> list[str]:
        return [r.variant for r in sorted(self.queued.values(), key=order_key(self.campaign))]

    # -- out --------------------------------------------------------------------------------------
    def changed_since(self, seq: int) -> list[RunRow]:
        """The rows changed after `seq`, in the snapshot's order (so new runs land where a full
        snapshot has them): walks back from the newest change to the first one already seen."""
        ids = []
        for rid in reversed(self.changed_at):
            if self.changed_at[rid] <= seq:
                break
            ids.append(rid)
        ids.sort(key=self.pos.__getitem__)
        return [self.rows[rid] for rid in ids]

    def delta(self, since: int, *, always: bool = False) -> Delta | None:
        """What a subscriber that has seen `since` lacks; None when it lacks nothing (`always`: a
        delta without runs then, for a poller that asked and waits for an answer)."""
        if since >= self.seq and not always:
            return None
        gpus, nvml_error, slots, runner, queue, pilot, events, retrieval, _ = self.head
        return Delta(
            seq=self.seq,
            since=since,
            now=self._now,
            bundle=self._bundle,
            gpus=gpus,
            nvml_error=nvml_error,
            slots=slots,
            runner=runner,
            runs=self.changed_since(since),
            queue=queue,
            pilot=pilot,
            events=events,
            retrieval=retrieval,
            variants=self.variants if self.variants_seq > since else None,
            epoch=self.epoch,
        )

    def snapshot(self) -> Snapshot:
        """The complete snapshot, current to `seq` (walks every row: what `status` asks for)."""
        gpus, nvml_error, slots, runner, queue, pilot, events, retrieval, _ = self.head
        return Snapshot(
            now=self._now,
            campaign=campaign_info(self.campaign),
            bundle=self._bundle,
            gpus=gpus,
            nvml_error=nvml_error,
            slots=slots,
            runner=runner,
            runs=list(self.rows.values()),
            queue=queue,
            variants=self.variants,
            pilot=pilot,
            events=events,
            retrieval=retrieval,
            seq=self.seq,
            epoch=self.epoch,
        )

    def row(self, run_id: str) -> RunRow | None:
        return self.rows.get(run_id)

    def set_campaign(self, campaign: Campaign) -> None:
        """The campaign file was reloaded (`start`, `decide`): variants may have been declared."""
        self.campaign = campaign
        self.variants_seq = -1
