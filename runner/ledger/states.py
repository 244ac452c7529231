"""A run's state, and a stop rule's, as the one set of words the ledger's `runs.state` column, the
status snapshot, the socket replies and the console all use.

`RunState` is a `StrEnum`, so a member *is* its string: it compares equal to the text read back
from SQLite or JSON, and it is written to both as that text. Torch-free and import-free, so the
console can use it too.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    QUEUED = "queued"  # in the queue, never launched (or put back for a resume)
    RUNNING = "running"  # a supervisor is watching it
    FINISHED = "finished"  # the training command exited 0
    FAILED = "failed"  # it exited non-zero, was killed, or its supervisor was lost
    STOPPED = "stopped"  # a stop rule fired
    ABORTED = "aborted"  # a person aborted it (or a pilot decision cut it while queued)
    REFUSED = "refused"  # the runner would not launch it (budget, expiry, ...)

    @property
    def ended(self) -> bool:
        """True for a state no run leaves on its own (a resume starts a new attempt)."""
        return self in TERMINAL_STATES


#: States that end an attempt; a run in one of them holds no GPU.
TERMINAL_STATES: frozenset[RunState] = frozenset(
    {RunState.FINISHED, RunState.FAILED, RunState.STOPPED, RunState.ABORTED, RunState.REFUSED}
)
#: States with a process on the host.
ACTIVE_STATES: frozenset[RunState] = frozenset({RunState.RUNNING})
#: States not yet over: waiting or running.
PENDING_STATES: frozenset[RunState] = frozenset({RunState.QUEUED, RunState.RUNNING})
#: Ended states that carry a reason worth showing (everything but a clean finish).
ENDED_WITH_REASON: frozenset[RunState] = TERMINAL_STATES - {RunState.FINISHED}
#: States a person may resume from the console.
RESUMABLE_STATES: frozenset[RunState] = frozenset({RunState.STOPPED, RunState.FAILED, RunState.ABORTED})


class RuleStatus(StrEnum):
    """Where one stop rule stands on one run (the snapshot's `rules[].state`)."""

    WAITING = "waiting"  # nothing to judge yet (no metric, before `after_step`, no checkpoint yet)
    OK = "ok"
    FIRED = "fired"  # it stopped the run
