"""The ledger snapshot a pull across hosts fetches: consistent while the runner writes (what sits
in the WAL file included), self-contained, and its paths movable without touching the original."""

from __future__ import annotations

import sqlite3

from runner.ledger import store as L
from runner.ledger.snapshot import rebase_paths, snapshot


def test_snapshot_holds_what_is_still_in_the_wal_and_paths_move_in_the_copy_only(tmp_path):
    live = tmp_path / "host" / ".campaign" / "ledger.sqlite"
    conn = L.connect(live)  # the runner's own connection: WAL, kept open
    conn.execute("PRAGMA wal_autocheckpoint=0")  # everything stays in ledger.sqlite-wal
    for i in range(50):
        conn.execute(
            "INSERT INTO runs(id, variant, category, config_hash, state, run_dir, planned_hours, queued_at) "
            "VALUES (?, 'v', 'essential', ?, 'finished', ?, 1.0, 0)",
            (f"v-{i:08x}", f"{i:08x}", f"{tmp_path}/host/runs/v-{i:08x}"),
        )
    assert (live.parent / "ledger.sqlite-wal").stat().st_size > 0
    out = snapshot(live, tmp_path / "copy.sqlite")
    assert not (tmp_path / "copy.sqlite-wal").exists()
    copy = sqlite3.connect(out)
    assert copy.execute("SELECT count(*) FROM runs").fetchone()[0] == 50
    copy.close()

    assert rebase_paths(out, f"{tmp_path}/host", f"{tmp_path}/pulled/a") == 50
    copy = sqlite3.connect(out)
    dirs = {r[0] for r in copy.execute("SELECT run_dir FROM runs")}
    copy.close()
    assert all(d.startswith(f"{tmp_path}/pulled/a/runs/") for d in dirs)
    assert conn.execute("SELECT run_dir FROM runs LIMIT 1").fetchone()[0].startswith(f"{tmp_path}/host/")
    conn.close()
