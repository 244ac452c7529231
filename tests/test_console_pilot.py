"""The pilot decision in the console, against a REAL runner: once the pilot phase is over the
banner asks for a decision and the footer shows its key; the dialog shows the re-estimate; a cut
to chosen variants goes out as the `decide` op, the runner records it and drops the queued run it
cuts, and the banner then recalls the decision. The wording is checked without a screen too."""

from __future__ import annotations

import datetime as dt

import pytest
from helpers_console import run_row, tick_until, write_pilot_campaign
from rich.console import Console

from console.app import make_app
from console.commands import ConsoleActions
from console.pilot_view import banner_text, cut_candidates, decision_words, estimate_table
from console.screens.pilot_dialog import PilotDialog
from console.widgets.header.status_banner import PilotBanner
from runner.daemon.nvml import Nvml
from tests.fixtures.console_nvml import RecordedNvml
from tests.fixtures.screen_text import screen_text

ESTIMATE = {
    "remaining_hours": 0.5,
    "fits": False,
    "over_hours": 1.25,
    "spare_hours": 0.0,
    "speed_factor": 1.4,
    "measured_runs": 2,
    "projected_end": 0.0,
    "retrieve_by": 3600.0,
    "items": [
        {
            "variant": "control",
            "category": "essential",
            "state": "done",
            "planned_hours": 1.0,
            "elapsed_hours": 1.2,
            "remaining_hours": 0.0,
        },
        {
            "variant": "wide",
            "category": "useful",
            "state": "waiting",
            "planned_hours": 2.0,
            "elapsed_hours": 0.0,
            "remaining_hours": 2.8,
        },
    ],
}


def test_banner_and_dialog_words():
    pilot = {"state": "awaiting_decision", "estimate": ESTIMATE}
    text = banner_text(pilot, now=0).plain
    assert text.startswith("PILOT OVER") and "(D)" in text
    assert "30m 00s of work left" in text and "does NOT fit: 1h 15m past the retrieval deadline" in text
    assert banner_text({"state": "running", "estimate": ESTIMATE}, now=0) is None
    decided = {
        "state": "decided",
        "decision": {
            "t": 100.0,
            "who": "me@host",
            "choice": "cut",
            "variants": ["control"],
            "dropped": ["wide"],
            "note": "too slow",
        },
    }
    assert banner_text(decided, now=150).plain == "PILOT DECIDED by me@host: cut to control (dropped wide): too slow"
    assert banner_text(decided, now=100 + 3600) is None  # an old decision is not news
    assert decision_words({"choice": "continue", "variants": []}) == "continue"
    console = Console(width=60, record=True)
    console.print(estimate_table(ESTIMATE))
    table = console.export_text()
    assert "wide" in table and "2.8h" in table and "control" not in table  # done items: nothing left
    assert cut_candidates({"estimate": ESTIMATE}, [{"name": "extra", "category": "exploratory"}]) == [
        ("control  (essential)", "control", True),
        ("wide  (useful)", "wide", False),
        ("extra  (exploratory)", "extra", False),
    ]


@pytest.fixture
def pilot_live(tmp_path, live_runner):
    return live_runner(write_pilot_campaign(tmp_path / "camp"), slots=1)


@pytest.mark.slow
async def test_pilot_decision_goes_to_a_real_runner(pilot_live):
    app = make_app(
        campaign=pilot_live, nvml=Nvml(backend=RecordedNvml()), auto_tick=False, use_user_keymap=False, tz=dt.UTC
    )
    async with app.run_test(size=(80, 24)) as pilot:
        snap = await tick_until(
            app,
            pilot,
            lambda: ((app.snapshot or {}).get("pilot") or {}).get("state") == "awaiting_decision" and app.snapshot,
            timeout=90,
            what="the pilot to end",
        )
        assert (r := run_row(app, "extra")) and r["state"] == "queued", snap["runs"]
        banner = app.main_screen.query_one(PilotBanner)
        assert banner.has_class("-awaiting")
        text = screen_text(app)
        assert "PILOT OVER" in text and "D pilot" in text.splitlines()[-1]
        names = [hit.text async for hit in ConsoleActions(app.screen).discover()]
        assert any("Pilot decision" in n for n in names)

        await pilot.press("D")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, PilotDialog)
        text = screen_text(app)
        assert "of work left" in text and "wide" in text and "does the console record" in text
        await pilot.press("down", "enter")  # the radio set: continue -> [cut]
        await pilot.pause()
        assert dialog.choice == "cut"
        keep = dialog.query_one("#keep")
        assert not keep.disabled and sorted(keep.selected) == ["control", "wide"]  # essentials kept
        await pilot.click("#note")
        await pilot.press(*"extra adds nothing", "enter")
        decided = await tick_until(
            app,
            pilot,
            lambda: (
                ((app.snapshot or {}).get("pilot") or {}).get("state") == "decided"
                and app.snapshot["pilot"]["decision"]
            ),
            timeout=60,
            what="the decision recorded",
        )
        op, args = app.actions[-1]
        assert op == "decide" and args["choice"] == "cut" and sorted(args["variants"]) == ["control", "wide"]
        assert args["note"] == "extra adds nothing" and "(console)" in args["who"]
        assert decided["choice"] == "cut" and decided["note"] == "extra adds nothing"
        extra = await tick_until(
            app,
            pilot,
            lambda: (r := run_row(app, "extra")) and r["state"] == "aborted" and r,
            what="the queued run cut",
        )
        assert "pilot decision" in extra["stop_reason"]
        assert banner.has_class("-decided") and "PILOT DECIDED" in screen_text(app)
        assert "cut to control, wide" in screen_text(app)
