"""The closing report's money: 47.14 USD over two approved runs is 23.57 each; none approved is undefined."""

from __future__ import annotations

import io
import json

from helpers_report import add_run, make_campaign, open_writable
from rich.console import Console
from rich.markdown import Markdown

from runner.cli import main
from runner.closing.pilot import record_decision
from runner.closing.report import build_report


def _two_approved_one_stopped(root):
    camp = make_campaign(root)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", dev_acc=0.70)
    add_run(conn, camp, "rank16", config_hash="22222222", dev_acc=0.705)
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss = nan at step 40",
        stop_value="nan",
        stop_step=40,
        checkpoint=False,
    )
    return camp, conn


def test_two_distinct_approved_runs_share_the_bundle(tmp_path):
    camp, conn = _two_approved_one_stopped(tmp_path / "camp")
    report = build_report(camp, conn).to_json()
    assert report["committed_usd"] == 47.14
    assert report["approved"] == 2
    assert report["usd_per_approved"] == 23.57
    assert report["other_spend_usd"] == 3.2
    assert report["rejected"] == [
        {
            "run": "rank64-33333333",
            "reason": "stopped by rule nonfinite: loss = nan at step 40",
            "variant": "rank64",
            "state": "stopped",
        }
    ]


def test_nothing_approved_is_undefined_with_cost_and_causes(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(
        conn,
        camp,
        "control",
        config_hash="11111111",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss = inf at step 20",
        checkpoint=False,
    )
    run_dir = add_run(conn, camp, "rank16", config_hash="22222222")
    (run_dir / "predictions.jsonl").unlink()
    report = build_report(camp, conn)
    data = report.to_json()
    assert data["approved"] == 0
    assert data["usd_per_approved"] is None
    assert data["committed_usd"] == 47.14
    assert {r["run"]: r["reason"] for r in data["rejected"]} == {
        "control-11111111": "stopped by rule nonfinite: loss = inf at step 20",
        "rank16-22222222": "missing: predictions.jsonl",
    }
    text = " ".join(report.to_text().split())  # the text wraps at 80 columns
    assert "undefined (nothing approved; the rental still cost 47.14 USD)" in text
    assert "why nothing was approved" in text and "missing: predictions.jsonl" in text
    assert "0.00 USD" not in text
    json.dumps(data, allow_nan=False)


def test_a_rerun_of_the_same_configuration_counts_once(tmp_path):
    camp = make_campaign(
        tmp_path / "camp",
        variants=(
            ("control", "essential", 10, ""),
            ("control_again", "useful", 10, ""),
            ("rank16", "essential", 10, ""),
        ),
    )
    conn = open_writable(camp)
    # resumed five times: one id, one deliverable
    add_run(conn, camp, "control", config_hash="11111111", attempts=5)
    # the same configuration under another name (timing it again): still one deliverable
    add_run(conn, camp, "control_again", config_hash="11111111", run_id="control_again-11111111")
    add_run(conn, camp, "rank16", config_hash="22222222", dev_acc=0.75)
    report = build_report(camp, conn)
    data = report.to_json()
    assert data["approved"] == 2
    assert data["usd_per_approved"] == 23.57
    assert data["not_counted"] == [
        {
            "run": "control_again-11111111",
            "variant": "control_again",
            "reason": "re-run of the same configuration as control-11111111: counted once",
        }
    ]
    assert "counted once" in report.to_markdown()


def test_planned_vs_actual_explains_differences(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", hours=9.5)
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss = nan at step 40",
        hours=0.25,
        checkpoint=False,
    )
    record_decision(conn, camp, "cut", ["control", "rank64"], "rank16 cannot change the choice", "ana@host")
    rows = {r["name"]: r for r in build_report(camp, conn).to_json()["planned_vs_actual"]}
    assert rows["control"]["planned_hours"] == 10 and rows["control"]["actual_hours"] == 9.5
    assert rows["control"]["difference_hours"] == -0.5
    assert "stopped by rule nonfinite" in rows["rank64"]["note"]
    assert rows["rank16"]["actual_hours"] is None
    assert rows["rank16"]["note"].startswith("cut at the pilot decision") and "ana@host" in rows["rank16"]["note"]
    assert rows["setup and data validation"]["note"].startswith("not measured")
    assert rows["retrieval before expiry"]["planned_hours"] == 2


def test_refused_run_is_explained(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="refused",
        hours=0,
        stop_reason="10 h planned, 4 h before the retrieval deadline",
        checkpoint=False,
        files=False,
    )
    rows = {r["name"]: r for r in build_report(camp, conn).to_json()["planned_vs_actual"]}
    assert (
        rows["rank64"]["note"] == "rank64-33333333 refused near expiry: 10 h planned, 4 h before the retrieval deadline"
    )


def test_markdown_renders_as_a_readable_page(tmp_path):
    camp, conn = _two_approved_one_stopped(tmp_path / "camp")
    record_decision(conn, camp, "continue", [], "pilot within plan", "ana@host")
    md = build_report(camp, conn).to_markdown()
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(Markdown(md))
    page = buf.getvalue()
    # the conclusion comes first, then the money, the rejected runs, planned vs actual, decisions
    order = [
        page.index(h)
        for h in ("Conclusion", "Budget", "Rejected and stopped runs", "Planned against actual", "Decisions")
    ]
    assert order == sorted(order)
    assert "23.57 USD" in page and "47.14 USD" in page and "dataset transfer" in page
    assert "rank64-33333333" in page and "continue: pilot within plan" in page
    assert "|" not in page.replace("│", "")  # tables rendered as tables, not raw pipes


def test_report_cli_json_text_and_markdown(tmp_path, capsys):
    camp, conn = _two_approved_one_stopped(tmp_path / "camp")
    conn.close()
    assert main(["report", str(camp.root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in (
        "committed_usd",
        "other_spend_usd",
        "approved",
        "usd_per_approved",
        "rejected",
        "planned_vs_actual",
        "comparisons",
        "conclusion",
    ):
        assert key in data
    for row in data["planned_vs_actual"]:
        assert set(row) >= {"name", "planned_hours", "actual_hours", "note"}
    for row in data["comparisons"]:
        assert set(row) >= {"variant", "run", "value", "control_value", "gain", "meets"}
    assert main(["report", str(camp.root)]) == 0
    text = capsys.readouterr().out
    assert text.index("Conclusion") < text.index("Budget")
    assert max(len(line) for line in text.splitlines()) <= 80  # reads in an 80-column terminal
    assert main(["report", str(camp.root), "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("# Closing report: rank-ablation")
    assert (camp.output_path / "REPORT.md").read_text().startswith("# Closing report")
    assert (camp.output_path / "manifest.toml").exists()


def test_a_run_cut_at_the_pilot_decision_says_so_once(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111")
    add_run(conn, camp, "rank64", config_hash="33333333", state="queued", checkpoint=False, files=False)
    record_decision(conn, camp, "cut", ["control"], None, "ana@host")
    # what the runner does with the queued run it was told to cut (runner.daemon.run_requests, RunManager.cut_queued)
    conn.execute(
        "UPDATE runs SET state = 'aborted', stop_reason = 'cut at the pilot decision', ended_at = 1.0"
        " WHERE id = 'rank64-33333333'"
    )
    data = build_report(camp, conn).to_json()
    reasons = {r["run"]: r["reason"] for r in data["rejected"]}
    assert reasons["rank64-33333333"] == "aborted: cut at the pilot decision"
    rows = {r["name"]: r for r in data["planned_vs_actual"]}
    assert rows["rank64"]["note"].startswith("rank64-33333333 cut at the pilot decision (")
    assert rows["rank64"]["note"].count("cut at the pilot decision") == 1
    assert rows["rank16"]["note"].startswith("cut at the pilot decision")
    assert data["decisions"][0]["choice"] == "cut" and data["decisions"][0]["who"] == "ana@host"
