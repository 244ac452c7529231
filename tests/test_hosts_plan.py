"""[[host]] tables: parsing, refusals (exit 2, field named) and each host's lane in `plan`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from helpers_hosts import two_host_brief

from runner.campaign.errors import CampaignError
from runner.campaign.host_plan import placement
from runner.campaign.hosts import on_host
from runner.campaign.model import load_campaign
from runner.campaign.plan import plan_campaign, plan_text

ROOT = Path(__file__).resolve().parents[1]


def campaign_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_plan_json_of_the_78_hour_example_on_two_3_day_hosts(tmp_path):
    two_host_brief(tmp_path / "c")
    r = campaign_cli("plan", "c", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["price_usd"] == 94.28 and data["plan"] == "2x3d" and data["bundles"] == 2
    assert data["fits"] is True and data["options"] == []
    lanes = {h["host"]: h for h in data["hosts"]}
    assert set(lanes) == {"a", "b"}
    for lane in lanes.values():
        assert lane["price_usd"] == 47.14 and lane["days"] == 3 and lane["gpu"] == "RTX 4090"
        # setup 4 h, 30 h of runs each, analysis 12 h, retrieval 2 h: 48 of 72 h
        assert lane["fits"] and lane["committed_hours"] == 48 and lane["window_hours"] == 72
        assert 0 <= lane["opens_hours"] and lane["end_of_work_hours"] <= lane["closes_hours"]
    assert sorted(lanes["a"]["variants"] + lanes["b"]["variants"]) == sorted(
        ["control", "rank16", "rank64", "lr2", "len512", "fp8"]
    )
    runs = [i for i in data["items"] if i["kind"] == "variant"]
    for run in runs:  # each run inside its host's window, named by host
        lane = lanes[run["host"]]
        assert lane["opens_hours"] <= run["start_hours"] and run["end_hours"] <= lane["closes_hours"]
        assert run["name"] in lane["variants"]
    for host in ("a", "b"):  # a host's GPU runs one variant at a time
        spans = sorted((r["start_hours"], r["end_hours"]) for r in runs if r["host"] == host)
        assert all(e <= s2 for (_, e), (s2, _) in zip(spans, spans[1:], strict=False))


def test_plan_text_shows_each_hosts_lane_window_and_price(tmp_path):
    path = two_host_brief(tmp_path / "c", variants={"control": {"host": "b"}})
    text = plan_text(plan_campaign(load_campaign(path)), width=100)
    assert "hosts" in text and "94.28 USD in all" in text and "2x3d" in text
    assert "11-29 09:00 -> 12-02 09:00" in text and text.count("47.14 USD") == 2
    assert "b:0" in text  # the control's GPU column names its host


def test_a_variant_placed_on_a_host_runs_there_and_the_split_places_the_rest(tmp_path):
    path = two_host_brief(tmp_path / "c", variants={"control": {"host": "b"}, "rank16": {"host": "b"}})
    c = load_campaign(path)
    where = placement(c)
    assert where["control"] == "b" and where["rank16"] == "b"
    assert set(where) == {v.name for v in c.variants} and set(where.values()) == {"a", "b"}
    assert plan_campaign(c).schedule.fits


def test_each_host_keeps_its_own_window_and_the_runner_sees_its_own_bundle(tmp_path):
    path = two_host_brief(
        tmp_path / "c",
        hosts=[
            {"name": "a", "ssh": "a", "dir": "/srv/c"},
            {"name": "late", "ssh": "b", "dir": "/srv/c", "started_at": "2026-11-30T09:00:00Z", "price_usd": 40.0},
        ],
    )
    c = load_campaign(path)
    assert c.bundle.started_at.day == 29  # hour 0: the earliest window
    late = on_host(c, "late")
    assert late.this_host == "late" and late.bundle.started_at.day == 30 and late.bundle.price_usd == 40.0
    rep = plan_campaign(c)
    lanes = {ln.host: ln for ln in rep.schedule.lanes}
    assert lanes["late"].opens_hours == 24 and lanes["late"].closes_hours == 96
    for item in rep.schedule.variant_items():  # nothing runs on `late` before its window opens
        if item.host == 1:
            assert item.start_hours >= 24
    assert rep.to_json()["price_usd"] == 87.14


def test_without_host_tables_nothing_changes(tmp_path):
    from helpers_plan import brief_campaign

    c = load_campaign(brief_campaign(tmp_path / "c", extra_variants=True))
    assert c.hosts == () and c.this_host is None
    data = plan_campaign(c).to_json()
    assert "hosts" not in data and data["price_usd"] == 47.14
    assert {o["plan"] for o in data["options"]} == {"7d", "2x3d", "reduced"}


def _edit(path: Path, fn) -> None:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    fn(data)
    path.write_text(tomli_w.dumps(data), encoding="utf-8")


def _variant(data, name):
    return next(v for v in data["variant"] if v["name"] == name)


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda d: _variant(d, "rank16").update(host="c"), "variant[1].host", "'c', which is not declared"),
        (lambda d: _variant(d, "rank16").update(host=["a", "b"]), "variant[1].host", "placed on 2 hosts"),
        (lambda d: _variant(d, "rank16").update(host="a", gpus=2), "variant[1].gpus", "host 'a' (RTX 4090) has 1"),
        (lambda d: _variant(d, "rank16").update(gpus=3), "variant[1].gpus", "the most any declared host has is 1"),
        (lambda d: d["host"][1].update(name="a"), "host[1].name", "declared twice"),
        (lambda d: d["host"][1].pop("ssh"), "host[1].ssh", "is required"),
        (lambda d: d["host"][0].update(port=70000), "host[0].port", "TCP port"),
        (lambda d: d["host"][0].update(days=5), "host[0].days", "not 5"),
        (lambda d: d["host"][0].update(colour="red"), "host[0].colour", "unknown key"),
    ],
)
def test_check_and_plan_refuse_with_the_field_named(tmp_path, edit, field, words):
    path = two_host_brief(tmp_path / "c")
    _edit(path, edit)
    with pytest.raises(CampaignError) as exc:
        load_campaign(path)
    assert exc.value.field == field and words in str(exc.value)
    for cmd in ("check", "plan"):
        r = campaign_cli(cmd, "c", cwd=tmp_path)
        assert r.returncode == 2 and field in r.stderr and r.stdout == ""


def test_a_host_named_without_host_tables_is_refused(tmp_path):
    from helpers_plan import brief_campaign

    path = brief_campaign(tmp_path / "c")
    _edit(path, lambda d: _variant(d, "control").update(host="a"))
    with pytest.raises(CampaignError) as exc:
        load_campaign(path)
    assert exc.value.field == "variant[0].host" and "no [[host]] table" in str(exc.value)


def test_check_names_each_host_and_what_runs_there(tmp_path):
    two_host_brief(tmp_path / "c", variants={"control": {"host": "b"}})
    r = campaign_cli("check", "c", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("host ")]
    assert len(lines) == 2 and "gpu-b:2222 /srv/camp; RTX 4090 x1, 3 days" in lines[1]
    assert "runs control" in lines[1] and "47.14 USD" in lines[0]
