"""`campaign status --json` turns the socket's "nan"/"inf" words into null plus a flag by looking
at each run's numeric fields only: the same JSON as walking every value, for any numbers, while a
text that happens to read "inf" (a variant's name) stays text, and a row without a non-finite
number is passed on untouched."""

from __future__ import annotations

import math

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.campaign.json_numbers import json_ready
from runner.daemon import protocol
from runner.daemon.status_json import NUMBER_FIELDS, status_ready
from runner.daemon.status_types import RuleState, RunRow, fin

numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6))


def run_row(i: int, nums: list, metrics: dict, rule_value, *, variant: str = "ctrl") -> RunRow:
    loss, lag, nxt, stop, elapsed, expected, rate = (fin(x) for x in nums)
    return RunRow(
        id=f"{variant}-{i:08x}",
        variant=variant,
        category="essential",
        state="running",
        pid=100 + i,
        step=10 * i,
        loss=loss,
        metrics={k: fin(v) for k, v in metrics.items()},
        checkpoint_path=None,
        checkpoint_step=None,
        checkpoint_verified=None,
        checkpoint_problem=None,
        verify_waiting=0,
        verify_lag_seconds=lag,
        next_checkpoint_seconds=nxt,
        stop_reason=None,
        stop_rule=None,
        stop_value=stop,
        launched_at=1.0e9 + i,
        ended_at=None,
        elapsed_seconds=elapsed,
        planned_hours=1.0,
        expected_hours=expected,
        attempts=1,
        gpu_slot="0",
        run_dir=f"/runs/{i}",
        lines=i,
        bad_lines=0,
        step_rate=rate,
        rules=[RuleState(kind="nonfinite", text="loss is not finite", state="ok", value=fin(rule_value))],
    )


def over_the_socket(rows: list[RunRow], **head) -> dict:
    """A snapshot as the CLI receives it: encoded by the runner, decoded from the line."""
    snap = {"now": 1.0e9, "gpus": [{"util": fin(head.get("util", 50.0))}], "runs": rows, "queue": []}
    return protocol.decode(msgspec.json.encode(snap))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(numbers, min_size=7, max_size=7),
            st.dictionaries(st.sampled_from(["dev_acc", "grad_norm", "lr"]), numbers, max_size=3),
            numbers,
        ),
        max_size=6,
    ),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_status_json_equals_walking_every_value(rows, util):
    snap = over_the_socket([run_row(i, *r) for i, r in enumerate(rows)], util=util)
    assert status_ready(snap) == json_ready(snap, texts=True)
    # and the order of keys scripts see is the same (each flag right after its key)
    assert msgspec.json.encode(status_ready(snap)) == msgspec.json.encode(json_ready(snap, texts=True))


def test_a_diverged_run_gets_null_and_flags_and_a_finite_one_is_passed_on_as_it_is():
    ok = run_row(1, [0.5, 1.0, 60.0, None, 30.0, 1.0, 2.0], {"dev_acc": 0.8}, 0.5)
    bad = run_row(2, [math.nan, 1.0, 60.0, math.inf, 30.0, 1.0, 2.0], {"grad_norm": -math.inf}, math.nan)
    snap = over_the_socket([ok, bad])
    out = status_ready(snap)
    assert out["runs"][0] is snap["runs"][0]  # no copy: nothing to change
    row = out["runs"][1]
    assert (row["loss"], row["loss_nonfinite"], row["stop_value"], row["stop_value_nonfinite"]) == (
        None,
        "nan",
        None,
        "inf",
    )
    assert (row["metrics"]["grad_norm"], row["metrics"]["grad_norm_nonfinite"]) == (None, "-inf")
    assert (row["rules"][0]["value"], row["rules"][0]["value_nonfinite"]) == (None, "nan")
    assert list(row).index("loss_nonfinite") == list(row).index("loss") + 1


def test_a_text_that_reads_like_a_number_stays_text():
    """A variant may be called "inf" (or a run id "nan"): only numeric fields are numbers."""
    row = run_row(1, [math.nan, 1.0, 60.0, None, 30.0, 1.0, 2.0], {}, None, variant="inf")
    out = status_ready(over_the_socket([row]))["runs"][0]
    assert out["variant"] == "inf" and out["id"].startswith("inf-") and out["loss_nonfinite"] == "nan"
    assert "variant_nonfinite" not in out


def test_every_numeric_field_of_a_run_row_is_looked_at():
    """A field added to RunRow as a number is covered without a list to keep in step."""
    nums = {f.name for f in msgspec.structs.fields(RunRow) if f.type in (float, float | None, float | str | None)}
    assert nums <= set(NUMBER_FIELDS) and "stop_value" in NUMBER_FIELDS
