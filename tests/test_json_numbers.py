"""Texts and types scripts and people read: rule texts with units and exact words, every number in
the JSON outputs a JSON number (non-finite: null plus a `_nonfinite` flag), and a stopped run's
value and step shown the same way whatever its rule."""

from __future__ import annotations

import json
import math

from helpers_report import add_run, make_campaign, open_writable

from runner.campaign.json_numbers import as_number, json_ready
from runner.campaign.objects import Rule
from runner.cli import main as cli_main
from runner.supervision.rules import Judge


def test_rule_texts_have_units_and_say_from_step():
    assert Rule("stalled", within_s=10.0).describe() == "no new metric for 10 s"
    assert Rule("stalled", within_s=5400.0).describe() == "no new metric for 1 h 30 min"
    assert Rule("no_resume_point", within_s=2700.0).describe() == "no verified checkpoint within 45 min of the start"
    assert Rule("below", metric="dev_acc", threshold=0.55, after_step=5).describe() == "dev_acc < 0.55 from step 5"


def test_from_step_5_judges_step_5_itself_and_not_step_4():
    j = Judge([{"kind": "below", "metric": "acc", "threshold": 0.5, "after_step": 5}], variant="v", started_at=0.0)
    assert j.feed({"step": 4, "acc": 0.1}) is None  # before step 5: not judged
    v = j.feed({"step": 5, "acc": 0.1})  # "from step 5": step 5 is judged
    assert v is not None and v.step == 5 and "judged from step 5" in v.reason


def test_json_ready_writes_null_and_a_flag_for_non_finite_numbers():
    out = json_ready({"loss": math.nan, "xs": [math.inf, 1.5], "deep": {"v": -math.inf}, "ok": 2.0})
    assert out == {
        "loss": None,
        "loss_nonfinite": "nan",
        "xs": [None, 1.5],
        "deep": {"v": None, "v_nonfinite": "-inf"},
        "ok": 2.0,
    }
    assert json_ready({"value": "nan", "text": "nan"}, texts=False) == {"value": "nan", "text": "nan"}
    assert json_ready({"value": "inf"}, texts=True) == {"value": None, "value_nonfinite": "inf"}
    assert as_number("0.5") == 0.5 and as_number("7") == 7 and math.isnan(as_number("nan"))
    assert as_number(None) is None and as_number("loss") is None


def test_status_report_and_verify_json_carry_numbers(tmp_path, capsys):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss is nan at step 40",
        stop_value="nan",
        stop_step=40,
    )
    add_run(
        conn,
        camp,
        "rank16",
        config_hash="22222222",
        state="stopped",
        stop_rule="below",
        stop_reason="dev_acc = 0.416667 is below 0.55 at step 100 (judged from step 100)",
        stop_value="0.41666666666666663",
        stop_step=100,
    )
    conn.close()
    assert cli_main(["status", str(camp.root), "--json"]) == 0  # the runner is down: from the ledger
    runs = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert runs["rank64"]["stop_value"] is None and runs["rank64"]["stop_value_nonfinite"] == "nan"
    assert runs["rank16"]["stop_value"] == 0.41666666666666663
    (fired,) = [r for r in runs["rank64"]["rules"] if r["state"] == "fired"]
    assert fired["value"] is None and fired["value_nonfinite"] == "nan" and fired["text"] == "loss not finite"
    for r in (rule for run in runs.values() for rule in run["rules"]):
        assert r["value"] is None or isinstance(r["value"], (int, float)), r

    assert cli_main(["report", str(camp.root), "--json"]) == 0
    report_text = capsys.readouterr().out
    assert "NaN" not in report_text and "Infinity" not in report_text
    rejected = {r["variant"]: r["reason"] for r in json.loads(report_text)["rejected"]}
    assert "at step 40" in rejected["rank64"] and "nan" in rejected["rank64"]
    assert "0.416667" in rejected["rank16"] and "at step 100" in rejected["rank16"]
    assert cli_main(["report", str(camp.root), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "0.416667" in md and "step 100" in md and "step 40" in md


def test_an_aborted_runs_time_used_does_not_drop_while_its_attempt_ends(tmp_path):
    from dataclasses import replace

    from runner.daemon.status import run_row
    from runner.ledger.records import RunRecord
    from runner.ledger.states import RunState

    now = 1_000_000.0
    base = RunRecord(
        id="a-00000000",
        variant="a",
        category="essential",
        config_hash="00000000",
        state=RunState.RUNNING,
        run_dir=tmp_path / "a",
        planned_hours=1.0,
        attempts=1,
        attempt_started_at=now - 1800,
        launched_at=now - 1800,
    )
    running = run_row(base, None, {}, {}, [], now)
    ending = run_row(replace(base, state=RunState.ABORTED), None, {}, {}, [], now + 5)
    ended = run_row(
        replace(base, state=RunState.ABORTED, active_seconds=1805.0, ended_at=now + 5), None, {}, {}, [], now + 9
    )
    assert [r.elapsed_seconds for r in (running, ending, ended)] == [1800.0, 1805.0, 1805.0]


def test_json_ready_flags_every_non_finite_float_and_word_in_place() -> None:
    from runner.campaign.json_numbers import json_ready

    inf = float("inf")
    obj = {"a": float("nan"), "b": [inf, "nan", 1.0, (-inf,)], "c": "-inf", "d": -inf, "e": 1.5, "f": True, "g": "x"}
    assert json_ready(obj, texts=True) == {
        "a": None,
        "a_nonfinite": "nan",
        "b": [None, None, 1.0, [None]],
        "c": None,
        "c_nonfinite": "-inf",
        "d": None,
        "d_nonfinite": "-inf",
        "e": 1.5,
        "f": True,
        "g": "x",
    }
    assert json_ready({"a": "nan", "b": [1e308 * 10]}) == {"a": "nan", "b": [None]}  # words only with texts
