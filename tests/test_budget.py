"""Budget arithmetic: the rental against approved deliverables, never a cost of zero."""

from __future__ import annotations

import pytest
from helpers_plan import variant, write_campaign

from runner.campaign.budget import budget_summary, cost_per_approved, format_usd
from runner.campaign.model import load_campaign


def test_47_14_over_two_approved_corpora_is_23_57_each():
    assert cost_per_approved(47.14, 2) == 23.57
    assert format_usd(cost_per_approved(47.14, 2)) == "23.57 USD"


def test_zero_approved_is_undefined_never_zero():
    assert cost_per_approved(47.14, 0) is None
    assert format_usd(None) == "undefined"


def test_a_committed_price_of_zero_or_a_bad_count_is_refused():
    for price in (0, -1.0, None):
        with pytest.raises(ValueError):
            cost_per_approved(price, 1)
    for count in (-1, 1.5, True):
        with pytest.raises(ValueError):
            cost_per_approved(47.14, count)


def test_format_usd():
    assert format_usd(47.14) == "47.14 USD"
    assert format_usd(110) == "110.00 USD"
    assert format_usd(1234.5) == "1,234.50 USD"


def _campaign(tmp_path, **bundle):
    return load_campaign(
        write_campaign(
            tmp_path,
            bundle=bundle,
            variants=[variant("control", 10)],
            phases=[{"name": "runs", "variants": ["control"]}],
            spend=[{"what": "dataset transfer", "usd": 3.20}, {"what": "storage", "usd": 1.05}],
        )
    )


def test_summary_keeps_other_spending_on_its_own_lines(tmp_path):
    s = budget_summary(_campaign(tmp_path), approved=2)
    data = s.to_json()
    assert data["committed_usd"] == 47.14  # the rental alone
    assert data["other_spend_usd"] == 4.25
    assert data["usd_per_approved"] == 23.57  # rental share only, spending not merged
    assert data["other_spend"] == [{"what": "dataset transfer", "usd": 3.2}, {"what": "storage", "usd": 1.05}]
    rows = dict(s.lines())
    assert rows["committed rental (IteraGPU RTX 4090, 3 days, catalog)"] == "47.14 USD"
    assert rows["other spending: dataset transfer"] == "3.20 USD"
    assert rows["rental share per approved deliverable"] == "23.57 USD"


def test_summary_with_nothing_approved_shows_the_committed_cost(tmp_path):
    s = budget_summary(_campaign(tmp_path), approved=0)
    assert s.to_json()["usd_per_approved"] is None
    value = dict(s.lines())["rental share per approved deliverable"]
    assert value.startswith("undefined") and "47.14 USD" in value
    assert all("0.00 USD" not in v for _, v in s.lines())


def test_the_b200_price_is_the_one_given_and_not_doubled(tmp_path):
    s = budget_summary(_campaign(tmp_path, gpu="B200", price_usd=480.0), approved=3)
    assert s.committed_usd == 480.0
    assert s.price_source == "campaign file (price_usd)"
    assert s.usd_per_approved == 160.0
