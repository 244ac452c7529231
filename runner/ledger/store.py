"""The campaign's ledger: one SQLite file (WAL) that the runner alone writes.

It holds every run, launch, checkpoint, metric summary, rule verdict, stop, abort, resume and
decision, with times. Runs are never deleted. The full metric stream stays in the run's folder;
the ledger keeps what the console and the report read. Readers (report, verify, console through the
runner) open it read-only.

The tables and `connect` are in `runner.ledger.schema`; the reads others make in `runner.ledger.queries`.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner.ledger.records import RUN_SELECT, RunRecord
from runner.ledger.schema import RUN_COLUMNS, SCHEMA, SCHEMA_VERSION, connect  # noqa: F401 - the ledger's API
from runner.ledger.states import RunState
from runner.ledger.values import bindable, count_sum, fold_last, is_int, is_num, number_text, text_number


def _check_columns(cols: dict[str, Any]) -> None:
    bad = [k for k in cols if k not in RUN_COLUMNS or k == "id"]
    if bad:
        raise KeyError(f"not run columns: {bad}")


def _insert_event(c: sqlite3.Connection, t: float, run_id: str | None, kind: str, data: dict[str, Any]) -> dict:
    try:
        text = json.dumps(data, default=str)
    except (ValueError, RecursionError):
        text = json.dumps({k: str(v)[:500] for k, v in data.items()})
    cur = c.execute("INSERT INTO events(t, run_id, kind, data) VALUES (?, ?, ?, ?)", (t, run_id, kind, text))
    return {"seq": cur.lastrowid, "t": t, "run_id": run_id, "kind": kind, **data}


class Ledger:
    """The runner's writing side. Every method commits before returning; `durable=True` commits
    with synchronous=FULL (verdicts, stops, aborts), so a power cut cannot lose them."""

    def __init__(self, path: str | Path, *, journal: str = "wal") -> None:
        self.path = Path(path)
        self.conn = connect(self.path, journal=journal)
        self.listeners: list[Callable[[dict], None]] = []
        # called after every write that concerns a run (the runner's in-memory view), with its id
        # and whether only its metric summary changed (metric_last, run_progress: a metric batch)
        self.run_listeners: list[Callable[[str, bool], None]] = []

    def _touched(self, run_id: str | None, metrics_only: bool = False) -> None:
        if run_id is not None:
            for fn in self.run_listeners:
                fn(run_id, metrics_only)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        c = self.conn
        if durable:
            c.execute("PRAGMA synchronous=FULL")
        c.execute("BEGIN IMMEDIATE")
        try:
            yield c
        except BaseException:
            c.execute("ROLLBACK")
            raise
        else:
            c.execute("COMMIT")
        finally:
            if durable:
                c.execute("PRAGMA synchronous=NORMAL")

    # -- events --------------------------------------------------------------------------------
    def event(
        self, kind: str, run_id: str | None = None, *, t: float | None = None, durable: bool = False, **data: Any
    ) -> dict:
        t = time.time() if t is None else t
        with self.transaction(durable=durable) as c:
            ev = _insert_event(c, t, run_id, kind, data)
        self.announce(ev)
        return ev

    def change_run(
        self,
        run_id: str,
        kind: str,
        cols: dict[str, Any],
        *,
        durable: bool = True,
        t: float | None = None,
        **data: Any,
    ) -> dict:
        """A run's state change (its end, a verdict, a refusal, an abort) and its event in ONE
        transaction: a kill between the two left a finished run without its `finished` event."""
        _check_columns(cols)
        t = time.time() if t is None else t
        with self.transaction(durable=durable) as c:
            if cols:
                sets = ", ".join(f"{k} = ?" for k in cols)
                c.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*map(bindable, cols.values()), run_id])
            ev = _insert_event(c, t, run_id, kind, data)
        self.announce(ev)
        return ev

    def announce(self, ev: dict) -> None:
        """Tell the listeners (the console's log) of an event written by another module's SQL."""
        self._touched(ev.get("run_id"))
        for fn in list(self.listeners):
            fn(ev)

    # -- runs ----------------------------------------------------------------------------------
    def insert_run(self, row: dict[str, Any]) -> None:
        cols = [k for k in row if k in RUN_COLUMNS]
        with self.transaction() as c:
            c.execute(
                f"INSERT INTO runs({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [bindable(row[k]) for k in cols],
            )
            c.execute("INSERT OR IGNORE INTO run_progress(run_id) VALUES (?)", (row["id"],))
        self._touched(row["id"])

    def update_run(self, run_id: str, *, durable: bool = False, **cols: Any) -> None:
        _check_columns(cols)
        if not cols:
            return
        sets = ", ".join(f"{k} = ?" for k in cols)
        with self.transaction(durable=durable) as c:
            c.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*map(bindable, cols.values()), run_id])
        self._touched(run_id)

    def run(self, run_id: str) -> RunRecord | None:
        return get_run(self.conn, run_id)

    def runs(self) -> list[RunRecord]:
        return all_runs(self.conn)

    # -- metrics and checkpoints ---------------------------------------------------------------
    def record_metrics(
        self,
        run_id: str,
        records: list[dict],
        *,
        offset: int,
        bad_lines: int,
        restarts: int,
        matched_no_numbers: int = 0,
    ) -> None:
        """Fold a batch of metric records into the run's summary (last value of each metric,
        progress counters, step rate). `bad_lines`/`restarts` are the reader's running totals;
        `matched_no_numbers` is added (stdout lines the variant's regex or format matched in this
        batch without giving a number: the count survives a runner restart with the offset)."""
        rows = [r for r in records if "event" not in r]
        n = len(rows)
        last = fold_last(rows)
        truncated = count_sum(rows, "truncated")
        samples = count_sum(rows, "samples")
        first_t = next((float(r["t"]) for r in rows if is_num(r.get("t")) and math.isfinite(r["t"])), None)
        last_t = next((float(r["t"]) for r in reversed(rows) if is_num(r.get("t")) and math.isfinite(r["t"])), None)
        steps = [r for r in (rows[0], rows[-1]) if is_int(r.get("step"))] if rows else []
        first_step, last_step = (steps[0]["step"], steps[-1]["step"]) if steps else (None, None)
        with self.transaction() as c:
            for name, (value, step, t) in last.items():
                real, text = number_text(value)
                c.execute(
                    "INSERT INTO metric_last(run_id, name, step, value, text, t) VALUES (?,?,?,?,?,?) "
                    "ON CONFLICT(run_id, name) DO UPDATE SET step=excluded.step, value=excluded.value, "
                    "text=excluded.text, t=excluded.t",
                    (run_id, name, step, real, text, t),
                )
            prev = c.execute("SELECT first_t, last_t, last_step FROM run_progress WHERE run_id=?", (run_id,)).fetchone()
            rate = None
            if (
                prev is not None
                and prev["last_t"] is not None
                and last_t is not None
                and last_step is not None
                and prev["last_step"] is not None
                and last_t > prev["last_t"]
            ):
                rate = (last_step - prev["last_step"]) / (last_t - prev["last_t"])
            elif first_t is not None and last_t is not None and last_t > first_t and last_step is not None:
                rate = (last_step - (first_step or 0)) / (last_t - first_t)
            c.execute("INSERT OR IGNORE INTO run_progress(run_id) VALUES (?)", (run_id,))
            c.execute(
                "UPDATE run_progress SET offset=?, lines=lines+?, bad_lines=?, restarts=?, "
                "matched_no_numbers=matched_no_numbers+?, "
                "first_t=COALESCE(first_t, ?), last_t=COALESCE(?, last_t), "
                "first_step=COALESCE(first_step, ?), last_step=COALESCE(?, last_step), "
                "truncated=truncated+?, samples=samples+?, step_rate=COALESCE(?, step_rate) "
                "WHERE run_id=?",
                (
                    offset,
                    n,
                    bad_lines,
                    restarts,
                    matched_no_numbers,
                    first_t,
                    last_t,
                    first_step,
                    last_step,
                    truncated,
                    samples,
                    rate,
                    run_id,
                ),
            )
        self._touched(run_id, metrics_only=True)

    def upsert_checkpoint(self, run_id: str, path: str, **fields: Any) -> bool:
        """Insert or update a checkpoint row; True when the row is new."""
        allowed = ("step", "t", "bytes", "verified", "grade", "holds", "problems", "write_seconds", "verify_seconds")
        vals = {
            k: (json.dumps(v, default=str) if k in ("holds", "problems") and v is not None else bindable(v))
            for k, v in fields.items()
            if k in allowed
        }
        vals.setdefault("t", time.time())
        with self.transaction() as c:
            row = c.execute("SELECT step FROM checkpoints WHERE run_id=? AND path=?", (run_id, path)).fetchone()
            new = row is None
            if new:
                cols = ["run_id", "path", *vals]
                c.execute(
                    f"INSERT INTO checkpoints({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [run_id, path, *vals.values()],
                )
            else:
                # the same path at another step is a new checkpoint written in place (nanoGPT's
                # out/ckpt.pt): its time restarts the countdown; otherwise keep when it was written
                if vals.get("step") is None or vals.get("step") == row["step"]:
                    vals.pop("t", None)
                vals = {k: v for k, v in vals.items() if v is not None}
                if vals:
                    sets = ", ".join(f"{k} = ?" for k in vals)
                    c.execute(
                        f"UPDATE checkpoints SET {sets} WHERE run_id=? AND path=?", [*vals.values(), run_id, path]
                    )
        self._touched(run_id)
        return new


# ---------------------------------------------------------------------------------------------
# Reading (works on a read-only connection too)


def get_run(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    row = conn.execute(RUN_SELECT + " WHERE id = ?", (run_id,)).fetchone()
    return RunRecord.from_row(row) if row is not None else None


def all_runs(conn: sqlite3.Connection) -> list[RunRecord]:
    """Every run, in the order queued (the status snapshot's order)."""
    sql = RUN_SELECT + " ORDER BY COALESCE(queued_at, launched_at), rowid"
    return [RunRecord.from_row(r) for r in conn.execute(sql)]


def runs_in_state(conn: sqlite3.Connection, state: RunState) -> list[RunRecord]:
    """The runs in one state (the queue: a few rows, however many runs have ended)."""
    sql = RUN_SELECT + " WHERE state = ? ORDER BY COALESCE(queued_at, launched_at), rowid"
    return [RunRecord.from_row(r) for r in conn.execute(sql, (str(state),))]


def metric_last(conn: sqlite3.Connection, run_id: str | None = None) -> dict[str, dict[str, dict]]:
    """run id -> metric name -> {"value", "step", "t"} (non-finite values as floats); one run's
    only when `run_id` is given."""
    out: dict[str, dict[str, dict]] = {}
    sql = "SELECT run_id, name, step, value, text, t FROM metric_last" + (" WHERE run_id = ?" if run_id else "")
    for r in conn.execute(sql, (run_id,) if run_id else ()):
        out.setdefault(r["run_id"], {})[r["name"]] = {
            "value": text_number(r["value"], r["text"]),
            "step": r["step"],
            "t": r["t"],
        }
    return out


def progress(conn: sqlite3.Connection, run_id: str | None = None) -> dict[str, dict]:
    sql = "SELECT * FROM run_progress" + (" WHERE run_id = ?" if run_id else "")
    return {r["run_id"]: dict(r) for r in conn.execute(sql, (run_id,) if run_id else ())}


def checkpoints(conn: sqlite3.Connection, run_id: str | None = None) -> list[dict]:
    sql = "SELECT * FROM checkpoints" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY t, step"
    rows = conn.execute(sql, (run_id,) if run_id else ()).fetchall()
    out = []
    for r in rows:
        d = dict(r)
        for k in ("holds", "problems"):
            d[k] = json.loads(d[k]) if d[k] else ([] if k == "problems" else None)
        out.append(d)
    return out


def events(conn: sqlite3.Connection, *, run_id: str | None = None, limit: int = 20) -> list[dict]:
    """The last `limit` events, oldest first, each {"seq", "t", "run_id", "kind", ...data}."""
    if run_id is None:
        rows = conn.execute("SELECT * FROM events ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
    else:
        rows = conn.execute(
            "SELECT * FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT ?", (run_id, limit)
        ).fetchall()
    out = []
    for r in reversed(rows):
        try:
            data = json.loads(r["data"])
        except ValueError:
            data = {}
        out.append(
            {
                **(data if isinstance(data, dict) else {}),
                "seq": r["seq"],
                "t": r["t"],
                "run_id": r["run_id"],
                "kind": r["kind"],
            }
        )
    return out


def last_event(conn: sqlite3.Connection, kind: str) -> dict | None:
    """The latest event of one kind ({"t", ...data}), or None."""
    row = conn.execute("SELECT t, data FROM events WHERE kind = ? ORDER BY seq DESC LIMIT 1", (kind,)).fetchone()
    if row is None:
        return None
    try:
        data = json.loads(row["data"])
    except ValueError:
        data = {}
    return {"t": row["t"], **(data if isinstance(data, dict) else {})}
