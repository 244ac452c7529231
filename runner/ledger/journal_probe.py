"""One SQLite file tried in a folder with a given journal mode: the ledger's part of the probe of
what the campaign folder's file system can hold (runner.daemon.storage runs it in a child process,
since a WAL shared-memory map that faults kills the process with SIGBUS)."""

from __future__ import annotations

import enum
import os
import sqlite3
from pathlib import Path


class Journal(enum.StrEnum):
    WAL = "wal"
    DELETE = "delete"  # a rollback journal: no shared memory map


def try_journal(folder: Path, journal: Journal) -> None:
    """Write and read back a small SQLite file in `folder` with this journal mode; raises where the
    folder's file system cannot hold it (no locks, or a shared-memory map that faults)."""
    path = folder / f".probe-{os.getpid()}-{journal}.sqlite"
    try:
        w = sqlite3.connect(path, isolation_level=None, timeout=0.5)
        try:
            w.execute("PRAGMA synchronous=OFF")  # the locks and the maps are tried, not the disk's speed
            got = w.execute(f"PRAGMA journal_mode={journal}").fetchone()[0]
            if str(got).lower() != journal:
                raise sqlite3.OperationalError(f"journal_mode={journal} not taken (got {got})")
            w.execute("CREATE TABLE t(x)")
            w.execute("INSERT INTO t VALUES (1)")
            r = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.5)  # a reader, as status is
            try:
                if r.execute("SELECT x FROM t").fetchall() != [(1,)]:
                    raise sqlite3.OperationalError("a reader did not see the row written")
            finally:
                r.close()
            w.execute("INSERT INTO t VALUES (2)")
        finally:
            w.close()
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(str(path) + suffix)
            except OSError:
                pass
