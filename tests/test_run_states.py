"""RunState: one enum for a run's state, written to SQLite and JSON as the same words as before."""

from __future__ import annotations

import json

import msgspec

from runner.ledger.states import ACTIVE_STATES, PENDING_STATES, TERMINAL_STATES, RunState
from runner.ledger.store import Ledger, connect, get_run


def test_the_sets_partition_the_states():
    assert TERMINAL_STATES | PENDING_STATES == set(RunState)
    assert not TERMINAL_STATES & PENDING_STATES
    assert ACTIVE_STATES == {RunState.RUNNING}
    assert all(s.ended for s in TERMINAL_STATES) and not any(s.ended for s in PENDING_STATES)


def test_a_state_is_written_as_its_word(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.insert_run(
        {
            "id": "a-00000000",
            "variant": "a",
            "category": "essential",
            "config_hash": "00000000",
            "state": RunState.QUEUED,
            "run_dir": str(tmp_path / "runs" / "a-00000000"),
            "planned_hours": 1.0,
        }
    )
    ledger.update_run("a-00000000", state=RunState.STOPPED, stop_reason="rule")
    ledger.close()
    conn = connect(tmp_path / "ledger.sqlite", readonly=True)
    raw = conn.execute("SELECT state, typeof(state) AS t FROM runs").fetchone()
    assert (raw["state"], raw["t"]) == ("stopped", "text")  # not '"stopped"' (JSON text)
    row = get_run(conn, "a-00000000")
    assert row is not None and row.state == RunState.STOPPED and RunState(row.state) is RunState.STOPPED
    assert json.dumps({"state": RunState.STOPPED}) == '{"state": "stopped"}'
    assert msgspec.json.encode({"state": RunState.STOPPED}) == b'{"state":"stopped"}'
