"""A consistent copy of a live ledger, and that copy moved to where its files were pulled.

The runner writes the ledger in WAL mode: copying `ledger.sqlite` alone can miss what sits in the
`-wal` file, and copying both while it writes can tear them. `VACUUM INTO` reads one transaction's
view through SQLite itself and writes a single, self-contained file, never touching the original.
The copy's absolute paths (each run's folder, each checkpoint) name the host's folder; once the
files are pulled elsewhere, `rebase_paths` rewrites them in the copy (never in a live ledger).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from runner.ledger import store as L


def snapshot(ledger: Path, out: Path) -> Path:
    """Write a consistent copy of `ledger` to `out` (replaced if it exists); `out` returned."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    tmp.unlink(missing_ok=True)
    conn = L.connect(ledger, readonly=True)
    try:
        conn.execute("VACUUM INTO ?", (str(tmp),))
    finally:
        conn.close()
    tmp.replace(out)
    return out


def rebase_paths(copy: Path, old_root: str, new_root: str) -> int:
    """In a snapshot (not a live ledger), paths under `old_root` now under `new_root`; rows changed."""
    old = old_root.rstrip("/") + "/"
    new = new_root.rstrip("/") + "/"
    conn = sqlite3.connect(copy, isolation_level=None)
    try:
        changed = 0
        for table, column in (("runs", "run_dir"), ("checkpoints", "path")):
            cur = conn.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                (new, len(old) + 1, len(old), old),
            )
            changed += cur.rowcount
        return changed
    finally:
        conn.close()
