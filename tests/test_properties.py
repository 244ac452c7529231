"""Property-based tests (Hypothesis) over what users and their scripts hand the tool: the campaign
loader, the duration parser, the metric decoders and the regex path. Each either accepts the input
as a valid model or refuses it plainly (CampaignError naming a field or line, ValueError for a
duration, a skipped line) — never a traceback. Example counts stay modest in the default run; the
fuzz script (tests/bench/fuzz_inputs.py) runs the big numbers."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.campaign.durations import MAX_SECONDS, parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.model import parse_campaign
from runner.campaign.numbers import metric_number, parse_number_text
from runner.ledger import store as L
from runner.supervision.line_parsers import RegexMetrics
from runner.supervision.metric_stream import decode_lines
from runner.supervision.rules import Judge
from tests.fuzz_inputs import campaign_text, metric_line, regex_line

pytestmark = pytest.mark.faults

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PATH = Path("/nonexistent/fuzz/campaign.toml")


def load_or_refuse(text: str):
    """The loader's contract: a Campaign, or a CampaignError that names where."""
    try:
        c = parse_campaign(text, PATH)
    except CampaignError as exc:
        assert exc.field or exc.line or "TOML" in exc.reason or "UTF-8" in exc.reason, str(exc)
        return None
    from runner.campaign import runid
    from runner.campaign.plan import plan_campaign

    plan_campaign(c, now=c.bundle.started_at.timestamp() + 3600)  # every accepted value plans
    for v in c.variants:
        runid.run_id(c, v)  # and freezes into a run id (run.toml)
    return c


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_the_loader_accepts_or_names_the_field(rnd):
    load_or_refuse(campaign_text(random.Random(rnd.random())))


@SETTINGS
@given(st.text(max_size=400))
def test_the_loader_never_raises_on_any_text(text):
    load_or_refuse(text)


@SETTINGS
@given(st.text(max_size=60))
def test_a_duration_is_a_finite_positive_number_of_seconds_or_a_value_error(text):
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["NaN", "nan", "-inf", "Infinity", "-nan(ind)", "1.#INF"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
RECORD = st.dictionaries(
    st.sampled_from(["t", "step", "loss", "acc", "samples", "truncated", "event", "path"]), JSONISH
)


@SETTINGS
@given(st.lists(RECORD, max_size=8))
def test_metric_records_never_stop_the_judge_or_the_ledger(tmp_path_factory, records):
    judge = Judge(
        [
            {"kind": "nonfinite"},
            {"kind": "above", "metric": "loss", "threshold": 10},
            {"kind": "truncated", "max_fraction": 0.5},
            {"kind": "stalled", "within": "1m"},
        ]
    )
    for rec in records:
        judge.feed(rec, now=1.0)
        judge.tick(now=2.0)
    ledger = L.Ledger(tmp_path_factory.mktemp("ledger") / "l.sqlite")
    ledger.record_metrics("r", records, offset=1, bad_lines=0, restarts=0)
    assert L.progress(ledger.conn)["r"]["lines"] == sum(1 for r in records if "event" not in r)
    L.metric_last(ledger.conn)
    ledger.close()


@SETTINGS
@given(st.lists(st.binary(max_size=200), max_size=10), st.randoms(use_true_random=False))
def test_metric_lines_decode_to_objects_or_count_as_garbage(chunks, rnd):
    rng = random.Random(rnd.random())
    lines = [c.replace(b"\n", b" ") for c in chunks] + [metric_line(rng, i) for i in range(10)]
    records, garbage = decode_lines(b"\n".join(lines) + b"\n")
    assert all(type(r) is dict for r in records)
    assert len(records) + garbage == sum(1 for line in lines if line.strip())


@SETTINGS
@given(st.text(max_size=80), st.randoms(use_true_random=False))
def test_the_regex_path_never_raises(text, rnd):
    rx = RegexMetrics(r"iter (?P<step>\d+): loss (?P<loss>\S+)")
    for line in (text, regex_line(random.Random(rnd.random()), 3)):
        rec = rx.parse(line)
        assert rec is None or isinstance(rec, dict)
    value = parse_number_text(text)
    assert value is None or isinstance(value, float)
    assert metric_number(text) is None or isinstance(metric_number(text), float)
