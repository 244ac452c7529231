"""Reading the ledger: the questions the launcher, the wrap-up, the closing and the CLI ask of it.

Every SELECT outside the writer's own bookkeeping (`store`) and the pilot's (`pilot_rows`) is here,
so the schema is read in one place. Each function works on a read-only connection too and returns
typed values (`RunRecord`, paths, steps), never `sqlite3.Row`s.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.ledger.records import RUN_SELECT, RunRecord
from runner.ledger.states import RunState


def run_records(conn: sqlite3.Connection) -> list[RunRecord]:
    """Every run, in launch order (queued ones last)."""
    rows = conn.execute(RUN_SELECT + " ORDER BY launched_at IS NULL, launched_at, queued_at, id").fetchall()
    return [RunRecord.from_row(r) for r in rows]


def run_exists(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


def any_launched(conn: sqlite3.Connection) -> bool:
    """True once any run has been launched (the plan can no longer be reshaped freely)."""
    return conn.execute("SELECT 1 FROM runs WHERE launched_at IS NOT NULL LIMIT 1").fetchone() is not None


@dataclass(frozen=True)
class LastValue:
    """A metric's last value as the ledger holds it; None when it was not a number."""

    value: float | None


def last_value(conn: sqlite3.Connection, run_id: str, name: str) -> LastValue | None:
    """The last value of metric `name` the run reported, or None when the ledger has no row."""
    row = conn.execute("SELECT value, text FROM metric_last WHERE run_id = ? AND name = ?", (run_id, name)).fetchone()
    if row is None:
        return None
    if row["value"] is not None:
        return LastValue(float(row["value"]))
    try:
        return LastValue(float(row["text"]))  # 'nan', 'inf', '-inf' kept as words
    except (TypeError, ValueError):
        return LastValue(None)


def metrics_offset(conn: sqlite3.Connection, run_id: str) -> int:
    """Bytes of the run's metrics.jsonl already folded into the ledger."""
    row = conn.execute("SELECT offset FROM run_progress WHERE run_id = ?", (run_id,)).fetchone()
    return int(row["offset"]) if row is not None and row["offset"] is not None else 0


# -- checkpoints -------------------------------------------------------------------------------


def checkpoint_paths(conn: sqlite3.Connection, run_id: str) -> list[Path]:
    """Every checkpoint the ledger recorded for the run, in no particular order."""
    return [Path(r["path"]) for r in conn.execute("SELECT path FROM checkpoints WHERE run_id = ?", (run_id,))]


def newest_checkpoints(conn: sqlite3.Connection, run_id: str, *, verified: bool = False) -> list[Path]:
    """The run's checkpoints, newest (highest step, then latest) first; only verified ones when asked."""
    sql = "SELECT path FROM checkpoints WHERE run_id = ?" + (" AND verified = 1" if verified else "")
    return [Path(r["path"]) for r in conn.execute(sql + " ORDER BY step DESC, t DESC", (run_id,))]


def max_verified_step(conn: sqlite3.Connection, run_id: str) -> int | None:
    row = conn.execute("SELECT MAX(step) AS s FROM checkpoints WHERE run_id = ? AND verified = 1", (run_id,)).fetchone()
    return None if row is None or row["s"] is None else int(row["s"])


def verified_step_since(conn: sqlite3.Connection, run_id: str, since: float) -> int | None:
    """The highest step of a checkpoint verified at or after `since` (epoch seconds), if any."""
    row = conn.execute(
        "SELECT step FROM checkpoints WHERE run_id = ? AND verified = 1 AND t >= ? ORDER BY step DESC LIMIT 1",
        (run_id, since),
    ).fetchone()
    return None if row is None else row["step"]


# -- events ------------------------------------------------------------------------------------


def last_event_kind(conn: sqlite3.Connection, run_id: str, kinds: tuple[str, ...]) -> str | None:
    """The kind of the run's latest event among `kinds`."""
    marks = ",".join("?" * len(kinds))
    row = conn.execute(
        f"SELECT kind FROM events WHERE run_id = ? AND kind IN ({marks}) ORDER BY seq DESC LIMIT 1",
        (run_id, *kinds),
    ).fetchone()
    return None if row is None else str(row["kind"])


def events_of(conn: sqlite3.Connection, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every event of these kinds, oldest first, each {"t", "kind", ...its data} (its data wins)."""
    marks = ",".join("?" * len(kinds))
    out = []
    for r in conn.execute(f"SELECT t, kind, data FROM events WHERE kind IN ({marks}) ORDER BY seq", kinds):
        try:
            data = json.loads(r["data"])
        except ValueError:
            data = {}
        out.append({"t": r["t"], "kind": r["kind"], **(data if isinstance(data, dict) else {})})
    return out


def current_retrieval(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The last verified `campaign pull` ({"t", ...data}) while it still covers what must leave the
    host: None before one, and again once a run is running, or launched or ended after it (its
    files are no longer all that there is)."""
    row = conn.execute(
        "SELECT seq, t, data FROM events WHERE kind = 'retrieval_verified' ORDER BY seq DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    t = row["t"]
    later = (
        conn.execute(
            "SELECT 1 FROM runs WHERE state = ? OR launched_at > ? OR ended_at > ? LIMIT 1", (RunState.RUNNING, t, t)
        ).fetchone()
        or conn.execute(
            "SELECT 1 FROM events WHERE seq > ? AND kind IN ('launched', 'resumed') LIMIT 1", (row["seq"],)
        ).fetchone()
    )
    if later is not None:
        return None
    try:
        data = json.loads(row["data"])
    except ValueError:
        data = {}
    return {"t": t, **(data if isinstance(data, dict) else {})}
