"""The console for a campaign over several hosts: a hosts panel (each bundle's countdown and
level, GPUs, slots, or UNREACHABLE with since when), runs named HOST/RUN, the header on the bundle
that ends first; and the live source refuses a start to a host it cannot reach, with the reason."""

from __future__ import annotations

import datetime as dt

import pytest
from helpers_hosts import two_host_brief

from console.app import make_app
from console.fleet_source import FleetSource, console_snapshot
from console.source import SnapshotSource, SourceDown, SourceError
from runner.campaign.model import load_campaign
from runner.daemon.nvml import Nvml
from tests.fixtures.console_nvml import RecordedNvml
from tests.fixtures.screen_text import screen_text

NOW = 1_764_500_000.0


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bundle(gpu: str, remaining: float, level: str = "ok") -> dict:
    return {
        "provider": "IteraGPU",
        "gpu": gpu,
        "days": 3,
        "plan": "3d",
        "price_usd": 47.14,
        "gpus": 1,
        "remaining_seconds": remaining,
        "retrieve_by": _iso(NOW + remaining - 7200),
        "retrieve_seconds": remaining - 7200,
        "expires_at": _iso(NOW + remaining),
        "warning": level,
    }


def merged() -> dict:
    run = {"variant": "control", "category": "essential", "state": "running", "step": 42, "loss": 0.5, "rules": []}
    return {
        "now": NOW,
        "campaign": {"name": "two", "question": "q", "root": "/x", "file": "/x/campaign.toml"},
        "hosts": [
            {
                "host": "a",
                "reachable": True,
                "unreachable_since": None,
                "error": None,
                "runner": {"pid": 1},
                "bundle": bundle("RTX 4090", 40 * 3600, "ok"),
                "gpus": [{"index": 0, "name": "RTX 4090"}],
                "slots": {"total": 1, "busy": 1},
                "queue": [],
            },
            {
                "host": "b",
                "reachable": False,
                "unreachable_since": NOW - 40,
                "error": "host b unreachable since ...",
                "runner": None,
            },
        ],
        "runs": [{**run, "id": "control-0123abcd", "host": "a", "key": "a/control-0123abcd"}],
        "placement": {"control": "a"},
    }


async def test_hosts_panel_runs_by_host_and_the_header_on_the_first_to_end():
    snap = console_snapshot(merged())
    assert snap["runs"][0]["id"] == "a/control-0123abcd" and snap["runs"][0]["run_dir"] is None
    app = make_app(
        SnapshotSource(snap),
        nvml=Nvml(backend=RecordedNvml(devices=[])),
        clock=lambda: NOW,
        auto_tick=False,
        tz=dt.UTC,
        use_user_keymap=False,
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        text = screen_text(app)
    assert "RTX 4090 3d (a)" in text and "left 1d 16h │" in text  # the header: the first bundle to end
    assert "a       RTX 4090 x1 3d  left 1d 16h [ok]  slots 1/1" in text
    assert "b       UNREACHABLE since" in text
    assert "a/control-0123abcd" in text


async def test_the_live_source_refuses_a_start_to_a_host_it_cannot_reach(tmp_path):
    path = two_host_brief(
        tmp_path / "c",
        hosts=[
            {"name": "a", "ssh": "nowhere-a.invalid", "dir": "/srv/c"},
            {"name": "b", "ssh": "nowhere-b.invalid", "dir": "/srv/c"},
        ],
    )
    source = FleetSource(load_campaign(path))
    try:
        with pytest.raises(SourceDown, match="unreachable since"):
            await source.status()
        with pytest.raises(SourceError, match=r"start control refused, nothing queued: host \w unreachable since"):
            await source.request("start", variant="control")
    finally:
        await source.close()
