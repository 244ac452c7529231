"""The console in the last hour of a rental: a verified retrieval replaces the urging, and failing
notifications are shown."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from console.app import make_app  # noqa: E402
from console.source import SnapshotSource  # noqa: E402
from console.widgets.header.status_banner import ExpiryBanner, NotifyBanner  # noqa: E402
from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon.nvml import Nvml  # noqa: E402
from tests.fixtures.console_nvml import RTX4090, RecordedNvml  # noqa: E402
from tests.fixtures.scene import moments, retrieval_record, snapshot, write_scene  # noqa: E402
from tests.fixtures.screen_text import screen_text  # noqa: E402


def _scene(tmp_path: Path, moment: str) -> tuple[Path, dict, float]:
    """The demo scene's folder, its snapshot at `moment` of the rental clock, and that time."""
    folder = tmp_path / "demo"
    write_scene(folder)
    now = moments(folder)[moment]
    return folder, snapshot(folder, now), now


def _app(folder: Path, snap: dict, now: float):
    return make_app(
        SnapshotSource(snap),
        campaign=load_campaign(folder / "campaign.toml"),
        nvml=Nvml(backend=RecordedNvml(devices=[RTX4090])),
        clock=lambda: now,
        auto_tick=False,
        tz=dt.UTC,
        use_user_keymap=False,
        ssh={"user": "me", "host": "gpu.example"},
    )


async def test_warning_urges_until_the_retrieval_is_verified_then_says_so(tmp_path):
    folder, snap, now = _scene(tmp_path, "warning")
    app = _app(folder, snap, now)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        banner = app.main_screen.query_one(ExpiryBanner)
        assert "WARNING" in screen_text(app) and not banner.has_class("-verified")
        await pilot.press("f")
        await pilot.pause()
        assert f"campaignpullme@gpu.example:{folder}" in "".join(screen_text(app).split())  # wrapped
    snap["retrieval"] = retrieval_record(folder, now)
    app = _app(folder, snap, now)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        text = screen_text(app)
        assert "RETRIEVED AND VERIFIED" in text and "31 files" in text and "me@laptop" in text
        assert "✓ retrieved" in text and "WARNING:" not in text
        await pilot.press("f")
        await pilot.pause()
        assert "Retrieved and verified" in screen_text(app)


async def test_failing_notifications_are_shown(tmp_path):
    folder, snap, now = _scene(tmp_path, "ok")
    snap["runner"] = {
        "pid": 1,
        "notify": {
            "urls": ["ntfy://ntfy.sh"],
            "sent": 0,
            "failing": [{"url": "ntfy://ntfy.sh", "error": "connection refused", "t": now, "event": "expiry"}],
        },
    }
    app = _app(folder, snap, now)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        assert app.main_screen.query_one(NotifyBanner).has_class("-failing")
        assert "notifications FAILING to ntfy://ntfy.sh: connection refused" in screen_text(app)


async def test_wrap_up_countdown_and_the_key_that_moves_it(tmp_path):
    from console.widgets.header.status_banner import WrapUpBanner
    from tests.fixtures.scene import iso

    folder, snap, now = _scene(tmp_path, "warning")
    snap["runner"] = {
        "pid": 1,
        "wrap_up": {"phase": "scheduled", "at": iso(now + 125), "runs": {}, "retrieve_by": iso(now + 900)},
    }
    app = _app(folder, snap, now)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        assert app.main_screen.query_one(WrapUpBanner).has_class("-shown")
        assert "WRAP-UP in 2m 05s" in screen_text(app) and "w wrap-up" in screen_text(app)
        await pilot.press("w")
        await pilot.pause()
        await pilot.press(*"+10m", "enter")
        await pilot.pause()
        assert ("wrap_up", {"who": "console", "at": now + 600}) in app.actions
        await pilot.press("w")
        await pilot.pause()
        await pilot.click("#cancel-wrap-up")
        await pilot.pause()
        assert ("wrap_up", {"who": "console", "cancel": True}) in app.actions


async def test_a_done_wrap_up_can_still_be_cancelled_from_the_console(tmp_path):
    from tests.fixtures.scene import iso

    folder, snap, now = _scene(tmp_path, "warning")
    snap["runner"] = {
        "pid": 1,
        "wrap_up": {"phase": "done", "at": iso(now - 60), "runs": {}, "retrieve_by": iso(now + 900)},
    }
    app = _app(folder, snap, now)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        assert "w wrap-up" in screen_text(app)  # it holds every launch: the key to lift it is shown
        await pilot.press("w")
        await pilot.pause()
        await pilot.click("#cancel-wrap-up")
        await pilot.pause()
        assert ("wrap_up", {"who": "console", "cancel": True}) in app.actions
