"""The answer to the question: positive names the variant, negative says so, no control no conclusion."""

from __future__ import annotations

from helpers_report import add_run, make_campaign, open_writable

from runner.closing.report import build_report


def _campaign(tmp_path, control_acc, rank16_acc, rank64_acc=None, **control_kw):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", dev_acc=control_acc, **control_kw)
    add_run(conn, camp, "rank16", config_hash="22222222", dev_acc=rank16_acc)
    if rank64_acc is not None:
        add_run(conn, camp, "rank64", config_hash="33333333", dev_acc=rank64_acc)
    return camp, conn


def test_no_variant_beats_the_control_by_min_gain_is_a_negative_result(tmp_path):
    camp, conn = _campaign(tmp_path, 0.700, 0.705)
    data = build_report(camp, conn).to_json()
    assert data["outcome"] == "negative"
    assert data["conclusion"].startswith(
        "Negative result: no approved variant beats the control 'control' by the minimum gain of 0.01 in dev_acc"
    )
    assert "rank16" in data["conclusion"]  # the best one is named with its gain
    [c] = data["comparisons"]
    assert c["variant"] == "rank16" and c["meets"] is False
    assert abs(c["gain"] - 0.005) < 1e-9 and c["control_value"] == 0.7


def test_a_variant_that_meets_the_rule_is_named(tmp_path):
    camp, conn = _campaign(tmp_path, 0.700, 0.705, rank64_acc=0.730)
    data = build_report(camp, conn).to_json()
    assert data["outcome"] == "positive"
    assert data["conclusion"].startswith("rank64 (dev_acc 0.73 vs 0.7, gain +0.03) meets the decision rule")
    assert "rank16" not in data["conclusion"]
    assert {c["variant"]: c["meets"] for c in data["comparisons"]} == {"rank16": False, "rank64": True}


def test_a_gain_of_exactly_min_gain_meets(tmp_path):
    camp, conn = _campaign(tmp_path, 0.70, 0.71)
    assert build_report(camp, conn).to_json()["comparisons"][0]["meets"] is True


def test_control_not_approved_means_no_conclusion_and_why(tmp_path):
    camp, conn = _campaign(
        tmp_path,
        0.70,
        0.80,
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss = nan at step 60",
        checkpoint=False,
    )
    data = build_report(camp, conn).to_json()
    assert data["outcome"] == "none"
    assert data["conclusion"] == (
        "No conclusion: the control 'control' has no approved run (control-11111111 "
        "stopped by rule nonfinite: loss = nan at step 60), so no variant can be "
        "compared with it."
    )
    assert data["comparisons"] == []


def test_lower_is_better_metric(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    text = camp.path.read_text().replace("higher_is_better = true", "higher_is_better = false")
    camp.path.write_text(text)
    from runner.campaign.model import load_campaign

    camp = load_campaign(camp.root)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", dev_acc=0.50)
    add_run(conn, camp, "rank16", config_hash="22222222", dev_acc=0.45)
    data = build_report(camp, conn).to_json()
    assert data["outcome"] == "positive" and abs(data["comparisons"][0]["gain"] - 0.05) < 1e-9


def test_without_a_decision_table_the_report_says_so(tmp_path):
    camp = make_campaign(tmp_path / "camp", no_decision=True)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111")
    data = build_report(camp, conn).to_json()
    assert data["conclusion"].startswith("No conclusion: the campaign file has no [decision] table")
    assert data["approved"] == 1


def test_a_nonfinite_final_value_never_meets(tmp_path):
    camp, conn = _campaign(tmp_path, 0.70, float("nan"))
    data = build_report(camp, conn).to_json()
    assert data["outcome"] == "negative"
    assert data["comparisons"][0]["meets"] is False and data["comparisons"][0]["gain"] is None
