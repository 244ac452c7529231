"""The stop rules judged on records fed by hand: pure logic, no processes."""

import math

import pytest

from runner.campaign.errors import CampaignError
from runner.supervision.rules import Judge, rule_from_table

T0 = 1_000_000.0


def judge(*tables, variant="control"):
    return Judge(list(tables), variant=variant, started_at=T0)


def test_nonfinite_fires_on_nan_with_value_step_and_rule():
    j = judge({"kind": "nonfinite", "metric": "loss"})
    assert j.statuses()[0]["state"] == "waiting"
    assert j.feed({"t": T0, "step": 1, "loss": 2.3}, now=T0 + 1) is None
    assert j.statuses()[0]["state"] == "ok"
    v = j.feed({"t": T0, "step": 2, "loss": float("nan")}, now=T0 + 2)
    assert v is not None and v.kind == "nonfinite" and v.metric == "loss" and v.step == 2
    assert math.isnan(v.value) and v.at == T0 + 2
    assert v.rule == {"kind": "nonfinite", "metric": "loss"}
    assert "loss is nan at step 2" in v.reason
    assert j.statuses()[0]["state"] == "fired"
    # the judge is done after the first verdict
    assert j.feed({"step": 3, "loss": float("inf")}) is None
    assert j.verdict is v


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), "nan", "Infinity"])
def test_nonfinite_accepts_infinities_and_strings(value):
    j = judge({"kind": "nonfinite"})  # metric defaults to loss
    assert j.feed({"step": 5, "loss": value}) is not None


def test_below_waits_for_after_step():
    j = judge({"kind": "below", "metric": "dev_acc", "threshold": 0.55, "after_step": 2000})
    assert j.feed({"step": 1000, "dev_acc": 0.1}) is None
    assert j.statuses()[0]["state"] == "waiting"
    assert j.feed({"step": 2000, "dev_acc": 0.6}) is None
    assert j.statuses()[0] == {"kind": "below", "text": "dev_acc < 0.55 from step 2000", "state": "ok", "value": 0.6}
    v = j.feed({"step": 2100, "dev_acc": 0.5})
    assert v.kind == "below" and v.value == 0.5 and v.step == 2100


def test_above_and_step_from_an_earlier_line():
    j = judge({"kind": "above", "metric": "loss", "threshold": 10, "after_step": 3})
    j.feed({"step": 4})
    v = j.feed({"loss": 11.0})
    assert v is not None and v.step == 4 and v.kind == "above"


def test_nan_does_not_break_below_rule():
    j = judge({"kind": "below", "metric": "dev_acc", "threshold": 0.5})
    assert j.feed({"step": 1, "dev_acc": float("nan")}) is None


def test_truncated_uses_running_sums():
    j = judge({"kind": "truncated", "max_fraction": 0.1})
    assert j.feed({"step": 1, "truncated": 1, "samples": 20}) is None  # 5%
    assert j.feed({"step": 2, "truncated": 2, "samples": 20}) is None  # 7.5%
    v = j.feed({"step": 3, "truncated": 3, "samples": 20})  # 10% ... not above
    assert v is None
    v = j.feed({"step": 4, "truncated": 1, "samples": 0})  # 7/60
    assert v is not None and v.kind == "truncated" and v.value == pytest.approx(7 / 60)


def test_truncated_zero_tolerance():
    j = judge({"kind": "truncated", "max_fraction": 0.0})
    assert j.feed({"step": 1, "truncated": 0, "samples": 64}) is None
    assert j.feed({"step": 2, "truncated": 1, "samples": 64}) is not None


def test_stalled_fires_on_tick_and_metric_lines_reset_it():
    j = judge({"kind": "stalled", "within": "15m"})
    assert j.next_deadline() == T0 + 900
    assert j.tick(T0 + 800) is None
    j.feed({"step": 1, "loss": 1.0}, now=T0 + 800)
    assert j.next_deadline() == T0 + 1700
    j.feed({"event": "checkpoint", "step": 1}, now=T0 + 1600)  # events are not metrics
    assert j.tick(T0 + 1650) is None
    v = j.tick(T0 + 1701)
    assert v.kind == "stalled" and v.value == pytest.approx(901)


def test_no_resume_point_and_checkpoint_verified():
    j = judge({"kind": "no_resume_point", "within": "45m"})
    assert j.tick(T0 + 2000) is None
    assert j.statuses()[0]["state"] == "waiting"
    v = j.tick(T0 + 2701)
    assert v.kind == "no_resume_point"
    j2 = judge({"kind": "no_resume_point", "within": "45m"})
    j2.checkpoint_verified(T0 + 600)
    assert j2.statuses()[0]["state"] == "ok"
    assert j2.tick(T0 + 99999) is None and j2.next_deadline() is None


def test_rules_limited_to_other_variants_do_not_apply():
    j = judge({"kind": "nonfinite", "variants": ["rank64"]}, variant="control")
    assert j.rules == [] and j.feed({"loss": float("nan")}) is None


def test_verdict_json_has_the_internals_keys():
    j = judge({"kind": "nonfinite"})
    v = j.feed({"step": 7, "loss": float("inf")}, now=T0)
    d = v.to_json(attempt=2)
    assert set(d) == {"attempt", "rule", "kind", "metric", "value", "step", "at", "reason"}
    assert d["attempt"] == 2


@pytest.mark.parametrize(
    "tbl,field",
    [
        ({"kind": "sometimes"}, "rule[0].kind"),
        ({"kind": "below", "metric": "x"}, "rule[0].threshold"),
        ({"kind": "stalled", "within": "soon"}, "rule[0].within"),
        ({"kind": "truncated", "max_fraction": 2}, "rule[0].max_fraction"),
        ({"kind": "nonfinite", "colour": "red"}, "rule[0].colour"),
    ],
)
def test_bad_rule_tables_name_the_field(tbl, field):
    with pytest.raises(CampaignError) as e:
        rule_from_table(tbl, source="runs/x/run.toml")
    assert e.value.field == field and "run.toml" in str(e.value)
