"""The schedule against the window and the options: the brief's figures, on real campaign files."""

from __future__ import annotations

import pytest
from helpers_plan import brief_campaign, variant, write_campaign

from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign
from runner.campaign.plan import TWO_HOSTS_CAVEAT, fmt_hours, plan_campaign, plan_text
from runner.campaign.schedule import build_schedule


def options_by_plan(report) -> dict:
    return {o.plan: o for o in report.options}


# -- the brief's worked example -----------------------------------------------------------------


def test_48h_in_a_3_day_window_leaves_24h_uncommitted(tmp_path):
    report = plan_campaign(load_campaign(brief_campaign(tmp_path)))
    s = report.schedule
    assert s.window_hours == 72
    assert s.committed_hours == 48
    assert s.uncommitted_hours == 24
    assert s.over_hours == 0
    assert s.fits and not report.tight
    assert report.options == ()  # fits comfortably: no other plan is pushed
    assert s.before_window_hours == 4  # reported, not counted


def test_30h_more_makes_78h_6h_over_and_the_options_price_from_the_catalog(tmp_path):
    report = plan_campaign(load_campaign(brief_campaign(tmp_path, extra_variants=True)))
    s = report.schedule
    assert (s.committed_hours, s.over_hours, s.uncommitted_hours, s.fits) == (78, 6, 0, False)
    opts = options_by_plan(report)
    assert list(opts) == ["7d", "2x3d", "reduced"]
    assert opts["7d"].price_usd == 110.0 and opts["7d"].fits
    assert opts["2x3d"].price_usd == 94.28 and opts["2x3d"].fits
    assert opts["2x3d"].committed_hours == 48  # six 10 h variants, three per host
    assert TWO_HOSTS_CAVEAT in opts["2x3d"].note
    red = opts["reduced"]
    assert red.fits and red.price_usd == 47.14
    assert red.extra["dropped"] == ["rank64", "fp8"]  # exploratory first
    assert red.extra["frees_hours"] == 20
    assert "rank64 (exploratory)" in red.note and "frees 20 h" in red.note


def test_30h_of_one_gpu_phase_is_not_helped_by_a_second_host(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10), variant("rank16", 10)],
        phases=[
            {"name": "setup", "hours": 4},
            {"name": "main runs", "variants": ["control", "rank16"]},
            {"name": "long evaluation", "hours": 50, "uses": "gpu"},
        ],
    )
    report = plan_campaign(load_campaign(path))
    assert report.schedule.committed_hours == 4 + 20 + 50 + 2
    opts = options_by_plan(report)
    assert opts["2x3d"].committed_hours == 4 + 10 + 50 + 2  # only the variants split
    assert opts["7d"].fits
    assert "reduced" not in opts  # nothing but essentials to drop


def test_reduced_protocol_drops_useful_variants_when_exploratory_are_not_enough(tmp_path):
    vs = [
        variant("control", 30),
        variant("a", 30, "useful"),
        variant("b", 30, "exploratory"),
        variant("c", 30, "useful"),
    ]
    path = write_campaign(tmp_path, variants=vs, phases=[{"name": "runs", "variants": ["control", "a", "b", "c"]}])
    report = plan_campaign(load_campaign(path))
    assert report.schedule.committed_hours == 122
    red = options_by_plan(report)["reduced"]  # dropping b alone leaves 92 h: not enough
    assert red.fits and red.extra["dropped"] == ["a", "b", "c"] and red.committed_hours == 32
    assert red.extra["frees_hours"] == 90


def test_a_tight_plan_shows_the_options_and_a_7_day_plan_is_listed_until_one_fits(tmp_path):
    path = write_campaign(
        tmp_path, variants=[variant("control", 66)], phases=[{"name": "runs", "variants": ["control"]}]
    )
    report = plan_campaign(load_campaign(path))
    assert report.schedule.fits and report.tight and report.schedule.uncommitted_hours == 4
    assert [o.plan for o in report.options] == ["7d", "2x3d"]

    path = write_campaign(
        tmp_path / "long", variants=[variant("control", 200)], phases=[{"name": "runs", "variants": ["control"]}]
    )
    report = plan_campaign(load_campaign(path))
    longer = [o for o in report.options if o.extra.get("bundles") == 1 and o.plan != "reduced"]
    assert [(o.plan, o.price_usd, o.fits) for o in longer] == [("7d", 110.0, False), ("30d", 390.0, True)]


# -- GPUs, overlap, subsets ---------------------------------------------------------------------


def test_the_b200_bundle_runs_two_variants_side_by_side_at_the_price_given(tmp_path):
    vs = [variant("control", 10), variant("rank16", 10), variant("rank64", 10, "useful")]
    path = write_campaign(
        tmp_path,
        bundle={"gpu": "B200", "price_usd": 500.0},
        variants=vs,
        phases=[{"name": "runs", "variants": ["control", "rank16", "rank64"]}],
    )
    c = load_campaign(path)
    assert c.bundle.gpus == 2 and c.bundle.price_usd == 500.0  # not doubled for two GPUs
    runs = {i.name: i for i in build_schedule(c).variant_items()}
    assert (runs["control"].start_hours, runs["control"].gpus) == (0, (0,))
    assert (runs["rank16"].start_hours, runs["rank16"].gpus) == (0, (1,))
    assert (runs["rank64"].start_hours, runs["rank64"].end_hours) == (10, 20)
    assert plan_campaign(c).to_json()["price_usd"] == 500.0


def test_a_b200_without_a_published_price_never_gets_one_invented(tmp_path):
    path = write_campaign(
        tmp_path,
        bundle={"gpu": "B200", "price_usd": 500.0},
        variants=[variant("control", 80)],
        phases=[{"name": "runs", "variants": ["control"]}],
    )
    opts = options_by_plan(plan_campaign(load_campaign(path)))
    assert opts["7d"].price_usd is None and "no price" in opts["7d"].note
    assert opts["2x3d"].price_usd == 1000.0 and "at the price you gave" in opts["2x3d"].note
    assert "hour" not in " ".join(o.note for o in opts.values()).replace(" h ", " ").replace("hosts", "")


def test_greedy_list_scheduling_on_two_gpus(tmp_path):
    vs = [variant("a", 4), variant("b", 10, gpus=2), variant("c", 2)]
    path = write_campaign(
        tmp_path,
        bundle={"gpu": "B200", "price_usd": 500.0},
        variants=vs,
        phases=[{"name": "runs", "variants": ["a", "b", "c"]}],
    )
    runs = {i.name: i for i in build_schedule(load_campaign(path)).variant_items()}
    assert (runs["a"].start_hours, runs["a"].end_hours, runs["a"].gpus) == (0, 4, (0,))
    assert (runs["b"].start_hours, runs["b"].end_hours, runs["b"].gpus) == (4, 14, (0, 1))  # needs both
    assert (runs["c"].start_hours, runs["c"].end_hours) == (14, 16)  # in order: list scheduling


def test_with_overlaps_a_host_phase_and_the_next_phase_waits_for_both(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10)],
        phases=[
            {"name": "runs", "variants": ["control"]},
            {"name": "write the report draft", "hours": 14, "uses": "human", "with": "runs"},
            {"name": "copy files", "hours": 1, "uses": "host"},
        ],
    )
    s = build_schedule(load_campaign(path))
    phases = {i.name: i for i in s.phase_items()}
    assert (phases["write the report draft"].start_hours, phases["write the report draft"].end_hours) == (0, 14)
    assert phases["copy files"].start_hours == 14
    assert s.committed_hours == 14 + 1 + 2


def test_with_may_name_a_later_phase(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10)],
        phases=[
            {"name": "setup", "hours": 2},
            {"name": "monitor", "hours": 3, "uses": "human", "with": "runs"},
            {"name": "runs", "variants": ["control"]},
        ],
    )
    phases = {i.name: i for i in build_schedule(load_campaign(path)).phase_items()}
    assert phases["monitor"].start_hours == phases["runs"].start_hours == 2


def test_a_subset_of_variants_for_the_reduced_protocol(tmp_path):
    c = load_campaign(brief_campaign(tmp_path, extra_variants=True))
    s = build_schedule(c, variants=["control", "rank16"])
    assert [i.name for i in s.variant_items()] == ["control", "rank16"]
    assert s.committed_hours == 4 + 20 + 12 + 2
    with pytest.raises(ValueError):
        build_schedule(c, variants=["nope"])


def test_a_phase_whose_variants_are_all_dropped_disappears(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10), variant("x", 5, "exploratory")],
        phases=[{"name": "main", "variants": ["control"]}, {"name": "extra", "variants": ["x"]}],
    )
    s = build_schedule(load_campaign(path), variants=["control"])
    assert [i.name for i in s.phase_items()] == ["main"]


# -- output -------------------------------------------------------------------------------------


def test_json_has_the_contract_keys(tmp_path):
    data = plan_campaign(load_campaign(brief_campaign(tmp_path, extra_variants=True))).to_json()
    for key in ("window_hours", "committed_hours", "uncommitted_hours", "over_hours", "fits", "items", "options"):
        assert key in data
    for item in data["items"]:
        assert {"name", "uses", "start_hours", "end_hours"} <= set(item)
    for opt in data["options"]:
        assert {"plan", "price_usd", "fits", "note"} <= set(opt)
    assert data["over_hours"] == 6 and data["fits"] is False


def test_the_text_fits_80_columns_and_names_the_options(tmp_path):
    text = plan_text(plan_campaign(load_campaign(brief_campaign(tmp_path, extra_variants=True))), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "78 h committed of 72 h" in text and "6 h OVER" in text
    assert "110.00 USD" in text and "94.28 USD" in text and "never shorten one run nor pool memory" in text
    assert "\x1b[" not in text


def test_the_shipped_example_fits_and_reads_in_80_columns():
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "rank-ablation"
    report = plan_campaign(load_campaign(example))
    assert report.schedule.fits
    text = plan_text(report, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "control (essential)" in text


def test_markup_in_names_is_printed_as_written(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10)],
        phases=[{"name": "[bold]setup[/]", "hours": 1}, {"name": "runs", "variants": ["control"]}],
    )
    assert "[bold]setup[/]" in plan_text(plan_campaign(load_campaign(path)))


def test_fmt_hours():
    assert [fmt_hours(x) for x in (48, 10.5, -4, 0.04, 1 / 3)] == ["48", "10.5", "-4", "0", "0.3"]


def test_a_variant_needing_more_gpus_than_the_bundle_is_refused(tmp_path):
    path = write_campaign(
        tmp_path, variants=[variant("control", 10, gpus=2)], phases=[{"name": "runs", "variants": ["control"]}]
    )
    with pytest.raises(CampaignError) as err:
        load_campaign(path)
    assert "variant[0].gpus" in str(err.value) and "never pool" in str(err.value)


def test_a_user_catalog_prices_the_longer_plans(tmp_path):
    (tmp_path / "prices.toml").write_text(
        '[[offer]]\nprovider = "Acme"\ngpu = "A100"\ngpus = 1\ndays = [1, 2, 5]\n'
        'prices_usd = { "1" = 20.0, "2" = 35.5, "5" = 80.0 }\n'
    )
    path = write_campaign(
        tmp_path,
        bundle={"provider": "Acme", "gpu": "A100", "days": 1, "catalog": "prices.toml"},
        variants=[variant("control", 30)],
        phases=[{"name": "runs", "variants": ["control"]}],
    )
    report = plan_campaign(load_campaign(path))
    assert report.campaign.bundle.price_usd == 20.0
    opts = options_by_plan(report)
    assert (opts["2d"].price_usd, opts["2d"].fits) == (35.5, True) and "5d" not in opts
    assert (opts["2x1d"].price_usd, opts["2x1d"].fits) == (40.0, False)


def test_the_plan_places_the_reader_in_the_window(tmp_path):
    from helpers_plan import START

    from runner.campaign.plan import where_now

    c = load_campaign(brief_campaign(tmp_path))
    t0 = START.timestamp()
    before = plan_campaign(c, now=t0 - 3 * 3600)
    assert before.now_hours == -3 and where_now(before) == "the window opens in 3 h"
    during = plan_campaign(c, now=t0 + 10 * 3600)
    assert during.to_json()["clock"]["now_hours"] == 10
    assert where_now(during) == "now: hour 10 of 72 (ok); the plan has main runs now"
    after = plan_campaign(c, now=t0 + 80 * 3600)
    assert where_now(after) == "the window closed 8 h ago" and after.to_json()["clock"]["level"] == "expired"


def test_a_phase_with_hours_and_variants_lasts_as_long_as_the_longer(tmp_path):
    path = write_campaign(
        tmp_path,
        variants=[variant("control", 10)],
        phases=[{"name": "runs", "hours": 12, "variants": ["control"]}, {"name": "after", "hours": 1, "uses": "host"}],
    )
    phases = {i.name: i for i in build_schedule(load_campaign(path)).phase_items()}
    assert phases["runs"].end_hours == 12 and phases["after"].start_hours == 12


def test_json_hours_carry_no_float_dust(tmp_path):
    vs = [variant(f"v{i}", 0.1) for i in range(3)]
    path = write_campaign(tmp_path, variants=vs, phases=[{"name": "runs", "variants": [v["name"] for v in vs]}])
    data = plan_campaign(load_campaign(path)).to_json()
    assert data["committed_hours"] == 2.3 and data["items"][0]["end_hours"] == 0.3
