"""The pilot decision point: frozen plan, completion, re-estimate from measurements, decision recorded."""

from __future__ import annotations

import json
import time

import pytest
from helpers_report import add_run, make_campaign, open_writable

from runner.campaign.errors import CampaignError
from runner.closing.pilot import frozen_plan, pilot_status, re_estimate, record_decision


@pytest.fixture
def camp(tmp_path):
    return make_campaign(tmp_path / "camp")


def test_plan_is_frozen_once_and_never_rewritten(camp):
    conn = open_writable(camp)
    assert pilot_status(camp, conn) is None  # nothing launched: nothing measured
    plan = frozen_plan(conn)
    assert plan is not None and plan["committed_hours"] == 3 + 30 + 2 + 2
    assert [i["name"] for i in plan["items"] if i["kind"] == "variant"] == ["control", "rank16", "rank64"]
    # the file changes afterwards: the frozen plan does not
    camp.path.write_text(camp.path.read_text().replace("hours = 3\n", "hours = 5\n", 1))
    from runner.campaign.model import load_campaign

    pilot_status(load_campaign(camp.root), conn)
    assert frozen_plan(conn) == plan
    kinds = [r["kind"] for r in conn.execute("SELECT kind FROM events")]
    assert kinds.count("plan_frozen") == 1


def test_a_plan_frozen_by_the_runner_is_used_as_is(camp):
    conn = open_writable(camp)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('plan_frozen', ?)",
        (
            json.dumps(
                {"frozen_at": 1.0, "items": [{"kind": "variant", "name": "control", "start_hours": 3, "end_hours": 13}]}
            ),
        ),
    )
    add_run(conn, camp, "control", config_hash="11111111", state="running")
    status = pilot_status(camp, conn)
    assert status["plan_frozen_at"] == 1.0
    assert [v["variant"] for v in status["variants"]] == ["control"]  # the frozen plan's scope


def test_pilot_runs_until_every_variant_reached_its_first_checkpoint(camp):
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="running")  # has a checkpoint
    add_run(conn, camp, "rank16", config_hash="22222222", state="running", checkpoint=False)
    status = pilot_status(camp, conn)
    assert status["state"] == "running" and status["complete"] is False
    reached = {v["variant"]: v["reached"] for v in status["variants"]}
    assert reached == {"control": True, "rank16": False, "rank64": False}
    # rank16 checkpoints; rank64 diverges and is stopped before any checkpoint: both count as done
    conn.execute(
        "INSERT INTO checkpoints(run_id, path, step, t) VALUES ('rank16-22222222', ?, 10, ?)",
        (str(camp.runs_dir / "rank16-22222222" / "checkpoints" / "ckpt-000000010.pt"), time.time()),
    )
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss = nan",
        checkpoint=False,
        hours=0.1,
    )
    status = pilot_status(camp, conn)
    assert status["state"] == "awaiting_decision" and status["complete"] is True
    assert {v["variant"]: v["how"] for v in status["variants"]} == {
        "control": "checkpoint",
        "rank16": "checkpoint",
        "rank64": "ended (stopped)",
    }
    pilot_status(camp, conn)
    assert [r["kind"] for r in conn.execute("SELECT kind FROM events")].count("pilot_complete") == 1


def test_a_phase_named_pilot_ends_the_pilot(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    text = camp.path.read_text().replace(
        'name = "setup and data validation"\nhours = 3\nuses = "gpu"', 'name = "pilot"\nvariants = ["control"]'
    )
    camp.path.write_text(text)
    from runner.campaign.model import load_campaign

    camp = load_campaign(camp.root)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="running")
    assert pilot_status(camp, conn)["complete"] is False  # checkpointed, but the phase goes on
    conn.execute("UPDATE runs SET state = 'finished', ended_at = ? WHERE id = 'control-11111111'", (time.time(),))
    status = pilot_status(camp, conn)
    assert status["complete"] is True and status["basis"] == "the phase 'pilot' ended"


def test_re_estimate_uses_measured_rates_and_checkpoint_costs(camp):
    conn = open_writable(camp)
    now = time.time()
    # control finished in 12 h against 10 planned: the measured speed factor is 1.2
    add_run(conn, camp, "control", config_hash="11111111", hours=12.0, launched_at=now - 13 * 3600)
    # rank16 runs at 0.1 steps/s with 4220 of 4320 steps left: 42200 s of work (12 h in all: 1.2 too)
    add_run(conn, camp, "rank16", config_hash="22222222", state="running", launched_at=now - 1000)
    conn.execute(
        "INSERT INTO metric_last(run_id, name, step, value) VALUES ('rank16-22222222', 'total_steps', 100, 4320)"
    )
    pilot_status(camp, conn, now)
    est = re_estimate(camp, conn, frozen_plan(conn), now=now)
    items = {i["variant"]: i for i in est["items"]}
    assert est["speed_factor"] == 1.2
    assert est["checkpoint_write_seconds"] == 0.5 and est["checkpoint_verify_seconds"] == 2.0
    assert items["control"]["state"] == "done" and items["control"]["remaining_hours"] == 0
    # 42200 s + 23 checkpoints every 30 min (0.5 s each) + the final write (0.5 s) and verify (2 s)
    assert items["rank16"]["remaining_hours"] == pytest.approx((42200 + 23 * 0.5 + 0.5 + 2.0) / 3600, abs=1e-3)
    assert "steps/s measured" in items["rank16"]["basis"]
    # rank64 waits: 10 h planned x 1.2, plus its checkpoint costs
    assert items["rank64"]["remaining_hours"] == pytest.approx((12 * 3600 + 24 * 0.5 + 0.5 + 2.0) / 3600, abs=1e-3)
    # one GPU: rank16 then rank64, then the 2 h analysis phase
    assert est["remaining_hours"] == pytest.approx(
        items["rank16"]["remaining_hours"] + items["rank64"]["remaining_hours"] + 2, abs=1e-3
    )
    assert est["fits"] is True and est["over_hours"] == 0
    assert est["projected_end"] == pytest.approx(now + est["remaining_hours"] * 3600, abs=1)


def test_re_estimate_says_when_the_window_no_longer_holds(tmp_path):
    # the window opened 60 h ago: 10 h left before the retrieval deadline
    camp = make_campaign(tmp_path / "camp", started=time.time() - 60 * 3600)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", hours=12.0, launched_at=time.time() - 20 * 3600)
    status = pilot_status(camp, conn)
    est = status["estimate"]
    assert est["fits"] is False
    assert est["over_hours"] == pytest.approx(est["remaining_hours"] - 10, abs=0.01)


def test_decision_is_recorded_with_who_what_when(camp):
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="running")
    add_run(conn, camp, "rank16", config_hash="22222222", state="running")
    add_run(conn, camp, "rank64", config_hash="33333333", state="queued", checkpoint=False)
    before = time.time()
    result = record_decision(
        conn, camp, "cut", ["control", "rank16"], "rank64 cannot change the choice", "ana@gpu-host"
    )
    assert result["choice"] == "cut" and result["variants"] == ["control", "rank16"]
    assert result["dropped"] == ["rank64"] and result["cut_runs"] == ["rank64-33333333"]
    row = conn.execute("SELECT * FROM decisions").fetchone()
    assert row["who"] == "ana@gpu-host" and row["choice"] == "cut" and row["t"] >= before
    assert json.loads(row["variants"]) == ["control", "rank16"]
    assert json.loads(row["estimate"])["items"]  # the re-estimate it was taken on
    assert conn.execute("SELECT cut_by_decision FROM runs WHERE id = 'rank64-33333333'").fetchone()[0] == 1
    assert conn.execute("SELECT cut_by_decision FROM runs WHERE id = 'rank16-22222222'").fetchone()[0] == 0
    event = conn.execute("SELECT data FROM events WHERE kind = 'decision'").fetchone()
    assert json.loads(event["data"])["who"] == "ana@gpu-host"
    status = pilot_status(camp, conn)
    assert status["state"] == "decided" and status["decision"]["note"] == "rank64 cannot change the choice"
    assert {i["variant"]: i["state"] for i in status["estimate"]["items"]}["rank64"] == "cut"


def test_bad_decisions_are_refused_without_recording(camp):
    conn = open_writable(camp)
    with pytest.raises(CampaignError, match="choice must be one of continue, cut, revisit"):
        record_decision(conn, camp, "stop", [], None, "ana")
    with pytest.raises(CampaignError, match="not declared in the campaign file: rank999"):
        record_decision(conn, camp, "cut", ["rank999"], None, "ana")
    with pytest.raises(CampaignError, match="keeps at least one variant"):
        record_decision(conn, camp, "cut", [], None, "ana")
    with pytest.raises(CampaignError, match="say who decides"):
        record_decision(conn, camp, "continue", [], None, " ")
    assert conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == 0
    revisit = record_decision(conn, camp, "revisit", ["control"], "the question is mis-aimed", "console")
    assert revisit["variants"] == [] and revisit["dropped"] == []


def test_pilot_status_on_a_read_only_ledger_writes_nothing(camp):
    from runner.ledger import store as ledger

    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="finished")
    add_run(conn, camp, "rank16", config_hash="22222222", state="finished")
    add_run(conn, camp, "rank64", config_hash="33333333", state="finished")
    ro = ledger.connect(camp.state_dir / "ledger.sqlite", readonly=True)
    status = pilot_status(camp, ro)
    assert status["state"] == "awaiting_decision"
    assert frozen_plan(conn) is None
    ro.close()
