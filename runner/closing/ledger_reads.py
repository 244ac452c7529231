"""Reading the ledger read-only for the closing: the runs with their frozen run.toml, final metrics.

Apart from verification so the report, the manifest, the pilot estimate and the CLI share one
read-only way in, whether or not the runner ever started.
"""

from __future__ import annotations

import json
import sqlite3
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.campaign.objects import Campaign
from runner.ledger import queries
from runner.ledger import store as ledger
from runner.ledger.queries import RunRecord


def ledger_path(campaign: Campaign) -> Path:
    return campaign.state_dir / "ledger.sqlite"


def open_ledger(campaign: Campaign) -> sqlite3.Connection | None:
    """The ledger, read-only; None when the runner never started (nothing recorded yet)."""
    path = ledger_path(campaign)
    if not path.exists():
        return None
    return ledger.connect(path, readonly=True)


@contextmanager
def ledger_for(campaign: Campaign, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection | None]:
    """`conn` when the caller has one (left open); otherwise the ledger opened read-only for the
    block and closed after it (None when the runner never started)."""
    if conn is not None:
        yield conn
        return
    own = open_ledger(campaign)
    try:
        yield own
    finally:
        if own is not None:
            own.close()


def read_runs(conn: sqlite3.Connection | None) -> list[RunRecord]:
    """Every run the ledger holds, in launch order (queued ones last), with its frozen `run.toml`."""
    if conn is None:
        return []
    return [replace(r, frozen=_read_toml(r.run_dir / "run.toml")) for r in queries.run_records(conn)]


def final_metric(conn: sqlite3.Connection | None, run: RunRecord, name: str) -> float | None:
    """The last value of metric `name` the run reported (ledger first, then its metrics.jsonl)."""
    if conn is not None:
        known = queries.last_value(conn, run.id, name)
        if known is not None:
            return known.value
    last = None
    for obj in iter_jsonl(run.run_dir / "metrics.jsonl"):
        if "event" not in obj and isinstance(obj.get(name), (int, float)) and not isinstance(obj.get(name), bool):
            last = float(obj[name])
    return last


def iter_jsonl(path: Path):
    """Complete JSON-object lines of a file; unparsable and partial lines are skipped."""
    try:
        with open(path, "rb") as fh:
            for n, line in enumerate(fh, 1):  # noqa: B007  (n names the failing line below)
                if not line.endswith(b"\n"):
                    break
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError):  # a 100,000-deep `[[[...` line is no record
                    continue
                if isinstance(obj, dict):
                    yield obj
    except OSError:
        return


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
