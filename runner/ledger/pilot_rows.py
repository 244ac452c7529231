"""The ledger's rows for the pilot decision point: the frozen plan, the pilot's end, measured rates
and checkpoint costs, and the decisions. Every SQL statement the pilot needs lives here, so the
pilot logic (runner.closing.pilot) reads typed rows and never writes SQL of its own.

Writers pass the runner's connection; a read-only reader's writes are skipped (nothing frozen or
noted), never an error, so `campaign status` without a runner still shows the pilot.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runner.ledger.states import RunState

PLAN_KEY = "plan_frozen"
PILOT_END_KEY = "pilot_complete"


class DecidedHow(StrEnum):
    """Where a decision came from: the console's dialog, `campaign decide`, or the wait running out."""

    CONSOLE = "console"
    SHELL = "shell"
    WAIT_ENDED = "wait_ended"


@dataclass(frozen=True)
class StepRate:
    per_second: float
    last_step: int
    span_seconds: float


@dataclass(frozen=True)
class CheckpointCosts:
    write_seconds: float | None
    verify_seconds: float | None


@dataclass(frozen=True)
class DecisionRow:
    seq: int
    t: float
    who: str
    how: str | None
    choice: str
    variants: tuple[str, ...]  # kept by a cut
    dropped: tuple[str, ...]  # taken out of the queue by a cut (never one that had run)
    note: str | None
    estimate: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "t": self.t,
            "who": self.who,
            "how": self.how,
            "choice": self.choice,
            "variants": list(self.variants),
            "dropped": list(self.dropped),
            "note": self.note,
            "estimate": self.estimate,
        }


# -- meta ------------------------------------------------------------------------------------


def meta_json(conn: sqlite3.Connection, key: str) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row["value"])
    except ValueError:
        return None


def put_meta_once(conn: sqlite3.Connection, key: str, value: Any, *, t: float, event: str, data: dict) -> bool:
    """Write `key` once, with its event; False when it was there already or the reader is read-only."""
    try:
        with _transaction(conn):
            cur = conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))
            if cur.rowcount:
                conn.execute(
                    "INSERT INTO events(t, run_id, kind, data) VALUES (?, NULL, ?, ?)", (t, event, json.dumps(data))
                )
            return bool(cur.rowcount)
    except sqlite3.OperationalError:  # a read-only reader (status without a runner): write nothing
        return False


# -- measurements ----------------------------------------------------------------------------


def first_checkpoint_times(conn: sqlite3.Connection) -> dict[str, float]:
    rows = conn.execute("SELECT run_id, MIN(t) AS t FROM checkpoints GROUP BY run_id").fetchall()
    return {r["run_id"]: r["t"] for r in rows}


def checkpoint_costs(conn: sqlite3.Connection) -> CheckpointCosts:
    row = conn.execute("SELECT AVG(write_seconds) AS w, AVG(verify_seconds) AS v FROM checkpoints").fetchone()
    return CheckpointCosts(row["w"], row["v"]) if row else CheckpointCosts(None, None)


def step_rates(conn: sqlite3.Connection) -> dict[str, StepRate]:
    """run -> steps per second over what the metric stream covered."""
    out = {}
    for r in conn.execute("SELECT run_id, first_t, last_t, first_step, last_step FROM run_progress"):
        if None in (r["first_t"], r["last_t"], r["first_step"], r["last_step"]):
            continue
        span, steps = r["last_t"] - r["first_t"], r["last_step"] - r["first_step"]
        if span > 0 and steps > 0:
            out[r["run_id"]] = StepRate(steps / span, r["last_step"], span)
    return out


def total_steps(conn: sqlite3.Connection, metric_names: tuple[str, ...]) -> dict[str, int]:
    """run -> the total step count it reported under one of `metric_names`."""
    marks = ",".join("?" * len(metric_names))
    rows = conn.execute(f"SELECT run_id, value FROM metric_last WHERE name IN ({marks})", metric_names)
    return {r["run_id"]: int(r["value"]) for r in rows if r["value"] is not None and r["value"] > 0}


def attempt_started_at(conn: sqlite3.Connection, run_id: str) -> float | None:
    """When the run's current attempt launched: the runner's column, else its last launch event."""
    try:
        row = conn.execute("SELECT attempt_started_at FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is not None and row[0] is not None:
            return float(row[0])
    except sqlite3.OperationalError:  # a ledger from before the column was added
        pass
    row = conn.execute(
        "SELECT MAX(t) AS t FROM events WHERE run_id = ? AND kind IN ('launched', 'resumed')", (run_id,)
    ).fetchone()
    return row["t"] if row and row["t"] is not None else None


def run_variants(conn: sqlite3.Connection) -> dict[str, bool]:
    """Every variant with a run in the ledger -> whether one of its runs was ever launched."""
    out: dict[str, bool] = {}
    for r in conn.execute("SELECT variant, MAX(launched_at IS NOT NULL) AS ran FROM runs GROUP BY variant"):
        out[r["variant"]] = bool(r["ran"])
    return out


# -- decisions -------------------------------------------------------------------------------


def decisions(conn: sqlite3.Connection) -> list[DecisionRow]:
    out = []
    for r in conn.execute("SELECT * FROM decisions ORDER BY seq"):
        keys = r.keys()
        out.append(
            DecisionRow(
                seq=r["seq"],
                t=r["t"],
                who=r["who"],
                how=r["how"] if "how" in keys else None,
                choice=r["choice"],
                variants=tuple(json.loads(r["variants"] or "[]")),
                dropped=tuple(json.loads(r["dropped"] or "[]")) if "dropped" in keys and r["dropped"] else (),
                note=r["note"],
                estimate=json.loads(r["estimate"]) if r["estimate"] else None,
            )
        )
    return out


def has_decision(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM decisions LIMIT 1").fetchone() is not None


def insert_decision(
    conn: sqlite3.Connection,
    *,
    t: float,
    who: str,
    how: str,
    choice: str,
    kept: list[str],
    dropped: list[str],
    note: str | None,
    estimate: dict[str, Any],
) -> tuple[int, list[str]]:
    """Record a decision and mark the queued runs of the dropped variants, in one transaction.
    Returns (the decision's seq, the queued runs it cut)."""
    with _transaction(conn):
        cur = conn.execute(
            "INSERT INTO decisions(t, who, how, choice, variants, dropped, note, estimate) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (t, who, how, choice, json.dumps(kept), json.dumps(dropped), note, json.dumps(estimate)),
        )
        seq = int(cur.lastrowid or 0)
        marked: list[str] = []
        if dropped:
            marks = ",".join("?" * len(dropped))
            marked = [
                r["id"]
                for r in conn.execute(
                    f"SELECT id FROM runs WHERE state = ? AND variant IN ({marks})", (RunState.QUEUED, *dropped)
                )
            ]
            conn.execute(
                f"UPDATE runs SET cut_by_decision = 1 WHERE state = ? AND variant IN ({marks})",
                (RunState.QUEUED, *dropped),
            )
        data = {
            "seq": seq,
            "who": who,
            "how": how,
            "choice": choice,
            "variants": kept,
            "dropped": dropped,
            "note": note,
        }
        conn.execute("INSERT INTO events(t, run_id, kind, data) VALUES (?, NULL, 'decision', ?)", (t, json.dumps(data)))
    return seq, marked


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT on an autocommit connection (the runner's); nested use is a no-op."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.began = False

    def __enter__(self) -> sqlite3.Connection:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.began = True
        return self.conn

    def __exit__(self, exc_type: object, *_: object) -> None:
        if not self.began:
            return
        self.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
