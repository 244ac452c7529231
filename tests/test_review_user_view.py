"""Found in the user's-view review before shipping: each test fails without its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign


def test_a_campaign_file_not_in_utf8_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    # A file saved as UTF-16 or Latin-1 by an editor on the user's laptop, then copied over.
    path = tmp_path / "campaign.toml"
    path.write_bytes('[campaign]\nname = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert info.value.file == str(path)
    assert info.value.line == 2
    assert "UTF-8" in info.value.reason


@pytest.fixture
def live_camp(camp, monkeypatch):
    """The shared `camp` folder (conftest.py), with one slot."""
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    return camp


@pytest.mark.slow
def test_status_abort_and_down_still_work_while_the_file_is_half_edited(live_camp, capsys) -> None:
    # 2 a.m.: the user breaks campaign.toml while the runner runs. The runner keeps the copy it
    # loaded; `status` must still show the runs, `abort` still stop one, `down` still stop it.
    import json

    from runner.cli import main as cli_main
    from runner.daemon import control
    from tests.helpers_runner import wait_for, write_campaign

    path = write_campaign(live_camp, [{"name": "a", "n": 100000, "delay": 0.05}])
    assert control.up(load_campaign(live_camp)).pid
    good = path.read_text()
    path.write_text(good.replace("hours = 1", 'hours = "one"'))
    capsys.readouterr()

    errors = []

    def running_id():
        assert cli_main(["status", str(live_camp), "--json"]) == 0
        out = capsys.readouterr()
        errors.append(out.err)
        snap = json.loads(out.out)
        return next((r["id"] for r in snap["runs"] if r["state"] == "running"), None)

    run_id = wait_for(running_id, timeout=90, what="the run to be running")
    err = errors[-1]
    assert "campaign.toml" in err and "variant[0].hours" in err

    assert cli_main(["abort", str(live_camp), run_id, "--reason", "while the file was broken"]) == 0
    assert f"{run_id}: aborted" in capsys.readouterr().out
    assert cli_main(["down", str(live_camp)]) == 0
    assert "the runner stopped" in capsys.readouterr().out
    assert not control.is_running(live_camp)
    # With the runner gone, a broken file is bad input again (exit 2), as it always was.
    assert cli_main(["status", str(live_camp)]) == 2


def test_pilot_summary_shows_the_measured_factor_as_time_not_as_speed() -> None:
    # The runner's speed_factor is actual time / planned time (runner/closing/pilot.py): 0.23 means the
    # runs went four times faster than planned. "speed x0.23 of plan" read as four times slower.
    from console.pilot_view import estimate_summary

    text = estimate_summary(
        {
            "remaining_hours": 0.03,
            "speed_factor": 0.23,
            "measured_runs": 2,
            "checkpoint_write_seconds": 0.0,
            "checkpoint_verify_seconds": 1.6,
        }
    ).plain
    assert "speed x0.23" not in text
    assert "take x0.23 their planned time" in text


async def test_abort_dialog_question_wraps_inside_the_dialog_at_80_columns() -> None:
    # At 80x24 the question "Abort run lr-x1000-aea24b6d? It keeps its id; the reason is recorded."
    # was cut at "the reason is re": the label was wider than its dialog.
    from textual.app import App
    from textual.widgets import Label

    from console.screens.abort_dialog import AbortDialog

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(AbortDialog("lr-x1000-aea24b6d"))

    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        label = app.screen.query_one(Label)
        assert label.size.width <= label.parent.content_size.width
        assert label.size.height >= 2  # wrapped, every word shown


def test_an_abort_that_arrives_after_the_run_ended_well_leaves_no_stop_reason(tmp_path: Path) -> None:
    # Seen in the demo: the user typed an abort reason while the run was on its last steps. The
    # supervisor had already written exit.json (return code 0) when the abort reached the runner,
    # so the run is rightly `finished`, but `status --json` went on giving it the abort's text
    # as `stop_reason` (and the manifest recorded it), as if it had been stopped.
    import json
    import time

    from runner.daemon.launcher import RunManager
    from runner.daemon.manager_state import Active
    from runner.daemon.slots import SlotPlan
    from runner.ledger.store import Ledger
    from tests.helpers_runner import write_campaign

    root = tmp_path / "camp"
    write_campaign(root, [{"name": "a"}])
    campaign = load_campaign(root)
    (root / ".campaign").mkdir(mode=0o700)
    ledger = Ledger(root / ".campaign" / "ledger.sqlite")
    manager = RunManager(campaign, ledger, SlotPlan(("",), ("cpu0",), "test"), grace_seconds=1)
    rid = manager.enqueue("a")["run"]
    run_dir = ledger.run(rid).run_dir
    now = time.time()
    ledger.update_run(rid, state="running", attempts=1, attempt_started_at=now - 5, launched_at=now - 5)
    # the attempt ended well before the abort arrived
    (run_dir / "exit.json").write_text(
        json.dumps({"attempt": 1, "returncode": 0, "signal": None, "killed_by": None, "ended_at": now - 1})
    )
    manager.abort(rid, "typed too late", "tester")
    act = Active(rid, 1, ["cpu0"], manager._watch(ledger.run(rid)))
    manager._finish(act)
    run = ledger.run(rid)
    assert run.state == "finished"
    assert run.stop_reason is None
    kinds = [e["kind"] for e in ledger.conn.execute("SELECT kind FROM events WHERE run_id=?", (rid,))]
    assert "aborted" in kinds and kinds[-1] == "finished"  # the late request stays in the history


def test_runs_table_marks_a_checkpoint_that_failed_verification_not_as_unknown() -> None:
    # The demo's planted run ends with a checkpoint whose weights are non-finite: graded, refused.
    # The table showed "@60 ?" (not yet verified) where the detail screen and `campaign status`
    # say it failed ("60:bad").
    from console.widgets.runs.cells import checkpoint_cell

    bad = checkpoint_cell({"state": "stopped", "checkpoint_step": 60, "checkpoint_verified": False})
    unknown = checkpoint_cell({"state": "stopped", "checkpoint_step": 60, "checkpoint_verified": None})
    good = checkpoint_cell({"state": "finished", "checkpoint_step": 2400, "checkpoint_verified": True})
    assert bad.plain == "@60 ✗"
    assert unknown.plain == "@60 ?"
    assert good.plain == "@2400 ✓"


async def test_connection_banner_shows_the_fix_within_its_two_lines_at_80_columns() -> None:
    # After `campaign down`, the console said "runner not answering — reconnecting (try 3); last
    # answer 3s ago: the runner is not running for /tmp/hdemo (no socket at .../runner.sock):"
    # and the command that fixes it (`campaign up /tmp/hdemo`) fell past the banner's two lines.
    from textual.app import App

    from console.widgets.header.status_banner import ConnectionBanner
    from runner.campaign.statedir import StatePaths
    from runner.daemon.client import unavailable

    # the fix travels as its own field (`hint`), never parsed out of the words
    exc = unavailable(
        StatePaths(Path("/home/user/campaigns/rank-ablation")),
        "no socket at /home/user/campaigns/rank-ablation/.campaign/runner.sock",
    )

    class Host(App):
        def compose(self):
            yield ConnectionBanner()

    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        banner = app.query_one(ConnectionBanner)
        banner.show(exc.reason, 3, 100.0, 103.0, hint=exc.hint)
        await pilot.pause()
        shown = " ".join(strip.text for strip in banner.render_lines(banner.region.reset_offset))
        assert "campaign up /home/user/campaigns/rank-ablation" in " ".join(shown.split())


def test_start_with_a_misspelt_variant_does_not_start_the_runner(tmp_path: Path, capsys) -> None:
    # `campaign start ./camp contrl` (a typo) exited 2 as it should, but only after starting the
    # runner, which then launched the whole plan: a typo must not set the rental's GPUs to work.
    from runner.cli import main as cli_main
    from runner.daemon import control
    from tests.helpers_runner import kill_processes_under, write_campaign

    root = tmp_path / "camp"
    write_campaign(root, [{"name": "control"}])
    try:
        assert cli_main(["start", str(root), "contrl"]) == 2
        err = capsys.readouterr().err
        assert "campaign.toml" in err and "'contrl' is not declared" in err
        assert not control.is_running(root)
        assert not (root / "runs").exists()
    finally:
        try:
            control.down(root, abort_runs=True, timeout=40)
        finally:
            kill_processes_under(tmp_path)


def test_run_detail_says_what_the_time_rules_values_are() -> None:
    # The detail screen showed "no verified checkpoint within 2 min  waiting (104.6)", then
    # "ok (2167)", and "no new metric for 2 min  ok (0.393)": seconds left, a step, seconds ago.
    from rich.console import Console

    from console.screens.run_detail import rules_table

    detail = {
        "run": {
            "rules": [
                {
                    "kind": "no_resume_point",
                    "text": "no verified checkpoint within 2 min",
                    "state": "waiting",
                    "value": 104.6,
                },
                {
                    "kind": "no_resume_point",
                    "text": "no verified checkpoint within 2 min",
                    "state": "ok",
                    "value": 2167,
                },
                {"kind": "stalled", "text": "no new metric for 2 min", "state": "ok", "value": 0.393},
                {"kind": "below", "text": "dev_acc < 0.3 after step 1200", "state": "ok", "value": 0.73},
            ]
        },
        "rules": [{"kind": "no_resume_point"}, {"kind": "no_resume_point"}, {"kind": "stalled"}, {"kind": "below"}],
    }
    console = Console(width=100, record=True)
    console.print(rules_table(detail))
    text = console.export_text()
    assert "waiting (1m 44s left)" in text
    assert "ok (verified @2167)" in text
    assert "ok (last metric 0s ago)" in text
    assert "ok (0.73)" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, expected",
    [
        (b"garbage\n", "does not load: not a PyTorch checkpoint (neither a zip archive nor a pickle)"),
        (b'{"format": "campaign-checkpoint/1", "step": 2400}\n', "looks like JSON text"),
    ],
)
def test_checkpoint_of_a_file_that_is_no_pickle_says_so(tmp_path: Path, content: bytes, expected: str, capsys) -> None:
    # `campaign checkpoint final.json` (the sidecar, an easy slip) said "does not load with
    # torch.load(weights_only=True): it pickles objects other than tensors and plain values":
    # wrong, it holds no pickle at all.
    import json

    from runner.cli import main as cli_main

    path = tmp_path / "ckpt.json"
    path.write_bytes(content)
    assert cli_main(["checkpoint", str(path), "--json"]) == 1  # graded in a fresh process
    result = json.loads(capsys.readouterr().out)
    assert result["verified"] is False and result["grade"] == "unreadable"
    assert any(expected in p for p in result["problems"]), result["problems"]
    assert not any("pickles objects" in p for p in result["problems"])


@pytest.mark.slow
def test_status_while_the_runner_is_down_does_not_call_a_dead_run_running(live_camp, capsys, monkeypatch) -> None:
    # The host's processes are killed at once (OOM killer, `kill -9 -1`): runner, supervisor and
    # training process. Until the next `up`, `campaign status --json` read the ledger and said
    # `running`, with a pid, for a run that no longer exists. A run whose supervisor outlives the
    # runner is still running and must stay so.
    import json
    import os
    import signal

    from runner.campaign.statedir import paths_for
    from runner.cli import main as cli_main
    from runner.daemon import client, control
    from tests.helpers_runner import wait_for, write_campaign

    write_campaign(live_camp, [{"name": "a", "n": 100000, "delay": 0.05}, {"name": "b", "n": 100000, "delay": 0.05}])
    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    campaign = load_campaign(live_camp)
    control.up(campaign)

    def both_running():
        runs = client.request(campaign, "status")["runs"]
        return (
            [r for r in runs if r["state"] == "running" and r["pid"]]
            if len([r for r in runs if r["state"] == "running" and r["pid"]]) == 2
            else None
        )

    a, b = sorted(wait_for(both_running, timeout=90, what="two running runs"), key=lambda r: r["variant"])
    sup_a = json.loads((Path(a["run_dir"]) / "supervisor.json").read_text())
    runner_pid = json.loads(paths_for(campaign).pid.read_text())["pid"]
    os.kill(runner_pid, signal.SIGKILL)
    os.killpg(sup_a["pgid"], signal.SIGKILL)  # a's training process group
    os.kill(sup_a["pid"], signal.SIGKILL)  # and a's supervisor
    wait_for(lambda: not control.is_running(campaign), timeout=30, what="the runner gone")

    def offline():
        assert cli_main(["status", str(live_camp), "--json"]) == 0
        snap = json.loads(capsys.readouterr().out)
        assert snap["runner"] is None
        return {r["variant"]: r for r in snap["runs"]}

    rows = wait_for(
        lambda: (lambda r: r if r["a"]["state"] != "running" else None)(offline()),
        timeout=30,
        what="a no longer shown running",
    )
    assert rows["a"]["state"] == "failed" and rows["a"]["pid"] is None
    assert "supervisor lost" in rows["a"]["stop_reason"]
    assert rows["b"]["state"] == "running"  # its supervisor lives on without the runner
    control.up(campaign)  # and the runner, back, records the same
    runs = {r["variant"]: r for r in client.request(campaign, "status")["runs"]}
    assert runs["a"]["state"] == "failed" and runs["b"]["state"] == "running"


@pytest.mark.parametrize("command", ["abort", "resume"])
def test_abort_or_resume_of_an_unknown_run_does_not_start_the_runner(tmp_path: Path, capsys, command) -> None:
    # `campaign resume ./camp contrl-1234` with the runner down started the runner (which
    # launches the plan) and only then said there is no such run.
    from runner.cli import main as cli_main
    from runner.daemon import control
    from tests.helpers_runner import kill_processes_under, write_campaign

    root = tmp_path / "camp"
    write_campaign(root, [{"name": "control"}])
    try:
        assert cli_main([command, str(root), "contrl-12345678"]) == 2
        assert "no run 'contrl-12345678'" in capsys.readouterr().err
        assert not control.is_running(root)
        assert not (root / "runs").exists()
    finally:
        try:
            control.down(root, abort_runs=True, timeout=40)
        finally:
            kill_processes_under(tmp_path)
