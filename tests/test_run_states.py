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


def test_the_ledger_gives_runs_as_typed_frozen_rows_holding_every_column(tmp_path):
    """Ledger.run/runs and the store's readers return RunRecord, never a dict: one field per
    `runs` column, typed (state an enum, run_dir a Path, times float or None), read-only, and
    `columns()` gives back exactly what SQLite holds."""
    import dataclasses
    from pathlib import Path

    import pytest

    from runner.ledger.records import RunRecord
    from runner.ledger.schema import RUN_COLUMNS
    from runner.ledger.store import all_runs, runs_in_state

    assert [f.name for f in dataclasses.fields(RunRecord) if f.name != "frozen"] == list(RUN_COLUMNS)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    for i, state in enumerate((RunState.QUEUED, RunState.RUNNING)):
        rid = f"a-0000000{i}"
        ledger.insert_run(
            {
                "id": rid,
                "variant": "a",
                "category": "essential",
                "config_hash": f"0000000{i}",
                "state": state,
                "run_dir": str(tmp_path / "runs" / rid),
                "planned_hours": 1,
                "queued_at": 100.0 + i,
            }
        )
    ledger.update_run("a-00000001", launched_at=200.0, attempts=1, gpu_slot="0", pid=4242, cut_by_decision=1)
    run = ledger.run("a-00000001")
    assert isinstance(run, RunRecord) and run.state is RunState.RUNNING and run.run_dir == tmp_path / "runs" / run.id
    assert (run.launched_at, run.ended_at, run.attempts, run.pid, run.cut_by_decision) == (200.0, None, 1, 4242, True)
    assert isinstance(run.run_dir, Path) and isinstance(run.planned_hours, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.state = RunState.FINISHED  # type: ignore[misc]
    assert [r.id for r in ledger.runs()] == [r.id for r in all_runs(ledger.conn)] == ["a-00000000", "a-00000001"]
    assert [r.id for r in runs_in_state(ledger.conn, RunState.QUEUED)] == ["a-00000000"]
    assert ledger.run("b-00000000") is None
    raw = dict(ledger.conn.execute("SELECT * FROM runs WHERE id = 'a-00000001'").fetchone())
    assert run.columns() == raw and json.dumps(run.columns())
    ledger.close()
