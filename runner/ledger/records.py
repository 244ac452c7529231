"""One `runs` row, typed: what every reader of a run gets from the ledger (the daemon, the status
view, the closing), never a `sqlite3.Row` or a bare dict.

Built once per row read; a frozen dataclass with slots, so building one is a few attribute stores
(the status view builds one per run the ledger wrote, each second).
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runner.ledger.schema import RUN_COLUMNS
from runner.ledger.states import RunState

#: The SELECT that `RunRecord.from_row` reads: every column of `runs`, in `RUN_COLUMNS` order.
RUN_SELECT = "SELECT " + ", ".join(RUN_COLUMNS) + " FROM runs"
_STATES: dict[str, RunState] = {s.value: s for s in RunState}


def _state(word: str) -> RunState:
    return _STATES.get(word) or RunState(word)  # a dict lookup; an unknown word still raises


#: (position in RUN_COLUMNS, conversion) for the columns SQLite holds in another type
_CONVERSIONS: tuple[tuple[int, Any], ...] = tuple(
    (RUN_COLUMNS.index(name), convert)
    for name, convert in (
        ("state", _state),
        ("run_dir", Path),
        ("planned_hours", lambda v: float(v or 0.0)),
        ("active_seconds", lambda v: float(v or 0.0)),
        ("attempts", lambda v: int(v or 0)),
        ("cut_by_decision", bool),
    )
)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """Every column of `runs` (see `runner.ledger.schema`); `frozen` is the configuration frozen
    into the run at launch (`run.toml`), filled in by the closing, which reads the run's folder."""

    id: str
    variant: str
    category: str
    config_hash: str
    state: RunState
    run_dir: Path
    planned_hours: float
    queued_at: float | None = None
    launched_at: float | None = None  # first launch
    ended_at: float | None = None  # last end (None while running)
    active_seconds: float = 0.0  # summed time of the attempts that ended
    attempts: int = 0  # launches, resumes included
    supervisor_pid: int | None = None
    supervisor_create_time: float | None = None
    pid: int | None = None  # the training process (group leader)
    pid_create_time: float | None = None
    gpu_slot: str | None = None  # CUDA_VISIBLE_DEVICES value, or "cpu"
    returncode: int | None = None
    stop_reason: str | None = None
    stop_rule: str | None = None
    stop_value: str | None = None
    stop_step: int | None = None
    cut_by_decision: bool = False
    attempt_started_at: float | None = None  # when the current (or last) attempt was launched
    exit_attempt: int | None = None  # the attempt whose exit.json has been recorded
    frozen: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_row(cls, r: sqlite3.Row | tuple) -> RunRecord:
        """A row selected with `RUN_SELECT` (its columns by position, in `RUN_COLUMNS` order:
        positions are several times cheaper than reading a `sqlite3.Row` by name), the few columns
        whose Python type differs from SQLite's converted."""
        values = list(r)
        for i, convert in _CONVERSIONS:
            values[i] = convert(values[i])
        return cls(*values)

    @property
    def frozen_variant(self) -> dict[str, Any]:
        value = self.frozen.get("variant")
        return value if isinstance(value, dict) else {}

    def columns(self) -> dict[str, Any]:
        """The row as JSON-ready column values (state and run_dir as text), for the edges that
        write JSON."""
        out = asdict(self)
        del out["frozen"]
        out["state"] = str(self.state)
        out["run_dir"] = str(self.run_dir)
        return out
