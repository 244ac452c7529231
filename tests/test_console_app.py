"""The app on a recorded snapshot: a user keymap remaps a binding by its id, the command palette
lists the same actions as the keys, actions refused by the source are reported, and a source
that goes down shows the reconnecting banner."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from console.app import make_app  # noqa: E402
from console.commands import ConsoleActions  # noqa: E402
from console.screens.abort_dialog import AbortDialog  # noqa: E402
from console.source import SnapshotSource  # noqa: E402
from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon.nvml import Nvml  # noqa: E402
from tests.fixtures.console_nvml import RTX4090, RecordedNvml  # noqa: E402
from tests.fixtures.scene import NOW, snapshot, write_scene  # noqa: E402
from tests.fixtures.screen_text import screen_text  # noqa: E402


def _app(folder, **kw):
    source = SnapshotSource(snapshot(folder, NOW + 20))
    app = make_app(
        source,
        campaign=load_campaign(folder / "campaign.toml"),
        nvml=Nvml(backend=RecordedNvml(devices=[RTX4090])),
        clock=lambda: NOW + 20,
        auto_tick=False,
        tz=dt.UTC,
        **kw,
    )
    return app, source


async def test_keymap_remaps_by_binding_id(tmp_path):
    write_scene(tmp_path / "demo")
    app, _ = _app(tmp_path / "demo", keymap={"abort": "x"})
    async with app.run_test(size=(80, 24)) as pilot:
        await app.tick()
        await pilot.pause()
        assert "x abort" in screen_text(app)
        helps = {h.text: h.help async for h in ConsoleActions(app.screen).discover()}
        assert helps["Abort the selected run (asks for a reason)"] == "key: x"
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, AbortDialog)
        await pilot.press("escape")


async def test_palette_lists_the_actions_and_refusals_are_reported(tmp_path):
    write_scene(tmp_path / "demo")
    app, source = _app(tmp_path / "demo", use_user_keymap=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.tick()
        await pilot.pause()
        provider = ConsoleActions(app.screen)
        hits = [hit async for hit in provider.discover()]
        names = [hit.text for hit in hits]
        assert {h.help for h in hits if "Abort" in h.text} == {"key: a"}  # the palette teaches the keys
        for words in (
            "Abort the selected run",
            "Start the next queued variant",
            "Resume",
            "checkpoint now",
            "plan",
            "retrieval",
            "Quit",
        ):
            assert any(words.lower() in n.lower() for n in names), words
        await pilot.press("n")  # the recorded source refuses: said, not crashed
        await pilot.pause()
        assert source.requests[-1] == ("start", {"variant": "lr-x10"})
        source.down = "connection refused"
        await app.tick()
        await pilot.pause()
        assert "reconnecting (try 1)" in screen_text(app)


async def test_report_screen_builds_off_the_ui_thread_and_never_shows_zero_cost(tmp_path, monkeypatch):
    """No run recorded: nothing approved, so the cost per approved deliverable is undefined (with
    the committed cost), never zero; the report is built in a worker thread, not the UI's."""
    import threading

    import console.screens.report_screen as report_screen

    threads = []
    pages: list[str] = []
    real = report_screen.build_page

    def recording(campaign, now=None):
        threads.append(threading.current_thread())
        data, markdown = real(campaign, now)
        pages.append(markdown)
        return data, markdown

    monkeypatch.setattr(report_screen, "build_page", recording)
    write_scene(tmp_path / "demo")
    app, _ = _app(tmp_path / "demo", use_user_keymap=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.tick()
        await pilot.pause()
        names = [hit.text async for hit in ConsoleActions(app.screen).discover()]
        assert any("closing report" in n for n in names)
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, report_screen.ReportScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = screen_text(app)
        assert threads and threads[0] is not threading.main_thread()
        assert "0 approved · cost per approved: undefined · committed 47.14 USD" in text
        assert "Conclusion" in text  # the page opens on the conclusion
        assert pages and 0 <= pages[0].index("Conclusion") < pages[0].index("Budget")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main_screen


async def test_retrieval_screen_says_when_the_address_is_private(tmp_path):
    write_scene(tmp_path / "demo")
    app, _ = _app(tmp_path / "demo", use_user_keymap=False, ssh={"user": "me", "host": "10.0.3.4"})
    async with app.run_test(size=(80, 40)) as pilot:
        await app.tick()
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        text = screen_text(app)
        assert "me@10.0.3.4:" in text and "private address" in text
