"""The console against a REAL runner on a small campaign of real scripts: keys start and abort
runs, a stop rule firing shows in the table, the expiry levels follow the injected clock, the
GPU panel says why NVML is unavailable, and the console reconnects after a runner restart."""

from __future__ import annotations

import datetime as dt

import pytest
from helpers_console import run_row, tick_until, write_live_campaign

from console.app import make_app
from console.widgets.gpus.gpu_panel import GpuPanel
from console.widgets.header.bundle_header import BundleHeader
from console.widgets.header.status_banner import ConnectionBanner, ExpiryBanner
from console.widgets.runs.runs_table import RunsTable
from runner.daemon import control
from runner.daemon.nvml import Nvml
from tests.fixtures.console_nvml import NVMLError_LibraryNotFound, RecordedNvml
from tests.fixtures.screen_text import screen_text

pytestmark = pytest.mark.slow


@pytest.fixture
def live(tmp_path, live_runner):
    return live_runner(write_live_campaign(tmp_path / "camp"))


def cell(app, run_id: str, column: str) -> str:
    return app.main_screen.query_one(RunsTable).cell_text(run_id, column)


async def test_keys_drive_a_real_runner(live):
    clock = {"now": live.bundle.started_at.timestamp() + 3600}
    no_driver = Nvml(backend=RecordedNvml(fail_init=NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found")))
    app = make_app(
        campaign=live, nvml=no_driver, clock=lambda: clock["now"], auto_tick=False, use_user_keymap=False, tz=dt.UTC
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await tick_until(app, pilot, lambda: app.snapshot, what="a first snapshot")

        # NVML unavailable: the panel says why and shows the host instead
        gpu_text = str(app.main_screen.query_one(GpuPanel).render())
        assert "NVML library not found" in gpu_text and "disk free" in gpu_text

        # n: the next variant (none queued: the first without a run) starts
        await pilot.press("n")
        ctrl = await tick_until(
            app, pilot, lambda: (r := run_row(app, "control")) and r["state"] == "running" and r, what="control running"
        )
        assert ("start", {"variant": "control"}) in app.actions
        assert cell(app, ctrl["id"], "state") == "running"

        # s: choose a variant: the planted one, which writes a NaN loss; the rule stops it
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("down", "enter")  # control, [planted], wide
        planted = await tick_until(
            app,
            pilot,
            lambda: (r := run_row(app, "planted")) and r["state"] == "stopped" and r,
            what="planted stopped by its rule",
        )
        assert "✗" in cell(app, planted["id"], "rules") and "nan" in cell(app, planted["id"], "rules").lower()
        assert cell(app, planted["id"], "state") == "stopped"

        # a: abort the selected run (the control, first row) with a reason
        table = app.main_screen.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index(ctrl["id"]))
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"operator test", "enter")
        await tick_until(
            app, pilot, lambda: (r := run_row(app, "control")) and r["state"] == "aborted", what="control aborted"
        )
        assert ("abort", {"run": ctrl["id"], "reason": "operator test"}) in app.actions
        assert cell(app, ctrl["id"], "state") == "aborted"
        # stopped runs stay, with their reason
        assert planted["id"] in table.rows

        # the expiry levels follow the injected clock
        header = app.main_screen.query_one(BundleHeader)
        banner = app.main_screen.query_one(ExpiryBanner)
        expires = live.bundle.expires_at.timestamp()
        retrieve = live.bundle.retrieve_by.timestamp()
        for now, level in (
            (expires - 20 * 3600, "ok"),
            (retrieve - 3600, "warning"),
            (retrieve + 60, "critical"),
            (expires + 60, "expired"),
        ):
            clock["now"] = now
            await app.tick()
            await pilot.pause()
            assert header.has_class(f"-{level}"), level
            assert banner.has_class(f"-{level}") == (level != "ok")
        assert "EXPIRED" in screen_text(app)


async def test_console_reconnects_after_runner_restart(live):
    app = make_app(campaign=live, nvml=Nvml(backend=RecordedNvml()), auto_tick=False, use_user_keymap=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await tick_until(app, pilot, lambda: app.snapshot, what="a first snapshot")
        first_pid = app.snapshot["runner"]["pid"]
        control.down(live, timeout=30)
        await tick_until(app, pilot, lambda: app.down, what="the console noticing the runner gone")
        assert app.main_screen.query_one(ConnectionBanner).has_class("-down")
        assert "reconnecting" in screen_text(app)
        control.up(live)
        await tick_until(
            app,
            pilot,
            lambda: app.down is None and app.snapshot["runner"]["pid"] != first_pid,
            what="the console back on the new runner",
        )
        assert not app.main_screen.query_one(ConnectionBanner).has_class("-down")
