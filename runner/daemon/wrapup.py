"""The wrap-up before the retrieval deadline: a decision taken by the rental clock.

At `[bundle] wrap_up` before the retrieval deadline (or when the user moved it; `campaign wrap-up`,
the console's `w`), nothing new launches; each running run is asked for a checkpoint (SIGUSR1,
forwarded by its supervisor to the training process) and stopped, keeping its id, once a
checkpoint verified after the request is in the ledger, or at the retrieval deadline at the
latest. When none is left running, verify runs and the manifest and RELOAD.md are written; then
`wrap_up_done` is recorded (and notified). Every step is a ledger event, so a restarted runner
takes the wrap-up back where it was.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runner.campaign.objects import Campaign
from runner.ledger import queries
from runner.ledger import store as L
from runner.ledger.states import RunState

REASON_VERIFIED = "wrap-up before the retrieval deadline: stopped at its verified checkpoint (step {step})"
REASON_DEADLINE = "wrap-up: no verified checkpoint after the request; stopped at the retrieval deadline"
BY = "wrap-up"  # who stops the runs (the rental clock's decision)


class Phase(StrEnum):
    NONE = "none"  # no wrap_up in the file, none set
    SCHEDULED = "scheduled"
    CANCELLED = "cancelled"
    RUNNING = "running"  # started: runs checkpointing and stopping
    WRITING = "writing"  # runs stopped: verify, manifest, RELOAD.md
    DONE = "done"


@dataclass
class WrapUp:
    campaign: Campaign
    ledger: L.Ledger
    asked: dict[str, float] = field(default_factory=dict)  # run id -> when its checkpoint was asked
    stopped: dict[str, str] = field(default_factory=dict)  # run id -> how it ended
    phase: Phase = Phase.NONE
    at: float | None = None  # when it starts (or started)
    started_at: float | None = None
    done_at: float | None = None

    def __post_init__(self) -> None:
        self.reload()

    # -- state from the file and the ledger ------------------------------------------------------
    def reload(self) -> None:
        """The schedule: the file's `wrap_up`, then the user's moves and cancels, then what ran."""
        conn = self.ledger.conn
        file_at = self.campaign.bundle.wrap_up_at
        self.at = file_at.timestamp() if file_at is not None else None
        self.phase = Phase.SCHEDULED if self.at is not None else Phase.NONE
        for ev in queries.events_of(conn, ("wrap_up_moved", "wrap_up_cancelled", "wrap_up_started", "wrap_up_done")):
            kind = ev["kind"]
            if kind == "wrap_up_moved":
                self.at, self.phase = float(ev["at"]), Phase.SCHEDULED
            elif kind == "wrap_up_cancelled":
                self.phase = Phase.CANCELLED
            elif kind == "wrap_up_started":
                self.phase, self.started_at = Phase.RUNNING, ev["t"]
                self.asked = {str(r): ev["t"] for r in ev.get("runs") or []}
            elif kind == "wrap_up_done":
                self.phase, self.done_at = Phase.DONE, ev["t"]

    @property
    def holding(self) -> bool:
        """Whether launches are held (from the start of the wrap-up on, until it is cancelled)."""
        return self.phase in (Phase.RUNNING, Phase.WRITING, Phase.DONE)

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        return {
            "phase": self.phase.value,
            "at": _iso(self.at),
            "seconds": None if self.at is None else self.at - now,
            "started_at": _iso(self.started_at),
            "done_at": _iso(self.done_at),
            "runs": {rid: self.stopped.get(rid, "checkpointing") for rid in self.asked},
            "retrieve_by": _iso(self.campaign.bundle.retrieve_by.timestamp()),
        }

    # -- the user's controls -----------------------------------------------------------------------
    def move(self, at: float, by: str) -> dict[str, Any]:
        if self.phase in (Phase.RUNNING, Phase.WRITING, Phase.DONE):
            raise ValueError(f"the wrap-up has already {'started' if self.phase != Phase.DONE else 'ended'}")
        deadline = self.campaign.bundle.retrieve_by.timestamp()
        if at >= deadline:
            raise ValueError(f"must be before the retrieval deadline ({_iso(deadline)})")
        self.ledger.event("wrap_up_moved", at=at, by=by, was=self.at)
        self.at, self.phase = at, Phase.SCHEDULED
        return self.to_json()

    def cancel(self, by: str) -> dict[str, Any]:
        """Launches go on again (what the wrap-up stopped stays stopped, its output stays written);
        also once it is done, or a wrap-up set too early would hold launches for the rest of the rental."""
        if self.phase is Phase.WRITING:
            raise ValueError("the wrap-up is writing the manifest and RELOAD.md: cancel it once it is done")
        if self.phase is Phase.CANCELLED:
            raise ValueError("the wrap-up is already cancelled")
        self.ledger.event("wrap_up_cancelled", by=by, was=self.phase.value)
        self.phase = Phase.CANCELLED
        return self.to_json()

    # -- each tick --------------------------------------------------------------------------------
    def tick(self, manager: Any, now: float | None = None) -> bool:
        """Advance; True when the runs are all stopped and the output should be written now."""
        now = time.time() if now is None else now
        if self.phase is Phase.SCHEDULED and self.at is not None and now >= self.at:
            self._start(manager, now)
        if self.phase is not Phase.RUNNING:
            return False
        deadline = self.campaign.bundle.retrieve_by.timestamp()
        for rid in list(manager.active):
            if rid not in self.asked:  # adopted after a restart, or resumed meanwhile: ask it too
                self._ask(manager, rid, now)
        for rid, asked_at in self.asked.items():
            if rid in self.stopped:
                continue
            run = self.ledger.run(rid)
            state = run.state if run is not None else None
            if state != RunState.RUNNING:
                reason = run.stop_reason if run is not None else None
                self.stopped.setdefault(rid, _how_it_ended(state, reason))
                continue
            step = queries.verified_step_since(self.ledger.conn, rid, asked_at)
            if step is not None:
                manager.abort(rid, REASON_VERIFIED.format(step=step), BY)
                self.stopped[rid] = f"stopped at verified checkpoint step {step}"
            elif now >= deadline:
                manager.abort(rid, REASON_DEADLINE, BY)
                self.stopped[rid] = "stopped at the deadline without a new verified checkpoint"
        if all(rid in self.stopped and rid not in manager.active for rid in self.asked):
            self.phase = Phase.WRITING
            return True
        return False

    def _start(self, manager: Any, now: float) -> None:
        running = sorted(manager.active)
        self.ledger.event(
            "decision",
            who="rental clock",
            choice="wrap-up",
            variants=[],
            note=f"wrap-up {_iso(self.at)}: no new launches; checkpoint and stop {len(running)} running run(s)",
        )
        self.ledger.event(
            "wrap_up_started", at=self.at, runs=running, retrieve_by=_iso(self.campaign.bundle.retrieve_by.timestamp())
        )
        self.phase, self.started_at = Phase.RUNNING, now
        for rid in running:
            self._ask(manager, rid, now)

    def _ask(self, manager: Any, rid: str, now: float) -> None:
        self.asked[rid] = now
        try:
            manager.signal_checkpoint(rid)
        except Exception as exc:  # ended meanwhile: nothing to ask
            self.stopped[rid] = f"not asked: {exc}"

    def finished(self, verify_ok: bool, manifest: str | None, note: str = "") -> None:
        self.ledger.event("wrap_up_done", runs=self.stopped, verify_ok=verify_ok, manifest=manifest, note=note)
        self.phase, self.done_at = Phase.DONE, time.time()


def _how_it_ended(state: str | None, stop_reason: str | None) -> str:
    """A run of the wrap-up found ended: stopped by the wrap-up (before a restart of the runner, whose
    reason says how), or on its own."""
    reason = stop_reason or ""
    if reason == REASON_DEADLINE:
        return "stopped at the deadline without a new verified checkpoint"
    head, _, step = reason.partition(REASON_VERIFIED.split("{", 1)[0])
    if not head and step:
        return f"stopped at verified checkpoint step {step.rstrip(')')}"
    return f"ended on its own ({state})"


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
