"""The pilot decision holds the queue: a real runner, two slots, a pilot phase; `campaign decide`
from the shell; the `[pilot] wait` after which the runner continues by itself and says so."""

from __future__ import annotations

import json
import time

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.objects import DEFAULT_PILOT_WAIT_S
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.cli.decide_cmd import split_decide_args
from runner.closing.pilot import continue_after_wait, launch_hold, pilot_status, record_decision
from runner.daemon import client, control
from runner.ledger import store as L
from runner.ledger.records import RunRecord
from tests.helpers_report import add_run, make_campaign, open_writable
from tests.helpers_runner import wait_for, write_campaign

PHASES = """
[[phase]]
name = "pilot"
variants = ["a", "b"]

[[phase]]
name = "main runs"
variants = ["c", "d", "e"]
"""


def _pilot_campaign(camp, wait: str):
    variants = [{"name": n, "n": 6, "delay": 0.03} for n in "abcde"]
    path = write_campaign(camp, variants, phase=[])
    path.write_text(path.read_text() + PHASES + f'\n[pilot]\nwait = "{wait}"\n')
    return load_campaign(camp)


def _ledger_runs(c) -> dict[str, RunRecord]:
    conn = L.connect(paths_for(c).ledger, readonly=True)
    try:
        return {r.variant: r for r in L.all_runs(conn)}
    finally:
        conn.close()


def _decisions(c) -> list[dict]:
    conn = L.connect(paths_for(c).ledger, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM decisions ORDER BY seq")]
    finally:
        conn.close()


@pytest.mark.slow
def test_two_slots_nothing_launches_between_the_pilots_end_and_campaign_decide(camp, capsys):
    c = _pilot_campaign(camp, "1h")
    control.up(c)
    pilot = wait_for(
        lambda: (lambda p: p if p and p["state"] == "awaiting_decision" else None)(
            client.request(c, "status").get("pilot")
        ),
        what="the pilot phase to end",
        timeout=40,
    )
    assert pilot["basis"] == "the phase 'pilot' ended"
    assert pilot["launches_held"] is True
    assert pilot["continues_at"] == pytest.approx(pilot["completed_at"] + 3600)
    time.sleep(1.5)  # several ticks with two free slots: the main runs stay queued
    runs = _ledger_runs(c)
    assert {runs[v].state for v in "ab"} == {"finished"}
    assert {v: runs[v].state for v in "cde"} == {"c": "queued", "d": "queued", "e": "queued"}
    capsys.readouterr()

    assert cli_main(["decide", str(camp), "cut", "c", "d", "--note", "e cannot change the answer"]) == 0
    out = capsys.readouterr().out
    assert "cut to c, d" in out and "dropped from the queue: e" in out
    runs = wait_for(
        lambda: (lambda r: r if {r[v].state for v in "cd"} == {"finished"} else None)(_ledger_runs(c)),
        what="the kept variants to run",
        timeout=40,
    )
    (decision,) = _decisions(c)
    assert decision["choice"] == "cut" and decision["how"] == "shell" and decision["who"].endswith("(shell)")
    assert json.loads(decision["dropped"]) == ["e"] and decision["note"] == "e cannot change the answer"
    assert min(runs[v].launched_at for v in "cd") >= decision["t"]  # none launched before the decision
    assert runs["e"].state == "aborted" and runs["e"].cut_by_decision == 1 and runs["e"].launched_at is None


@pytest.mark.slow
def test_the_runner_continues_by_itself_after_the_wait_and_records_it(camp):
    c = _pilot_campaign(camp, "2s")
    control.up(c)
    runs = wait_for(
        lambda: (lambda r: r if all(v in r and r[v].state == "finished" for v in "abcde") else None)(_ledger_runs(c)),
        what="every run to finish after the wait",
        timeout=60,
    )
    (decision,) = _decisions(c)
    assert decision["who"] == "runner" and decision["how"] == "wait_ended" and decision["choice"] == "continue"
    assert decision["note"] == "no decision within 2 s: continued"
    pilot_end = max(runs[v].ended_at for v in "ab")
    assert min(runs[v].launched_at for v in "cde") >= pilot_end + 2.0
    assert decision["t"] >= pilot_end + 2.0
    pilot = client.request(c, "status")["pilot"]
    assert pilot["state"] == "decided" and pilot["decision"]["note"] == "no decision within 2 s: continued"


def test_the_default_wait_is_two_hours_then_continue_is_recorded(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    assert camp.pilot.wait_s == DEFAULT_PILOT_WAIT_S == 2 * 3600
    conn = open_writable(camp)
    for name, h in (("control", "11111111"), ("rank16", "22222222"), ("rank64", "33333333")):
        add_run(conn, camp, name, config_hash=h, state="running")  # each has its first checkpoint
    seen = time.time()
    status = pilot_status(camp, conn)  # the runner sees the pilot's end now: the wait starts
    end = status["continues_at"] - 7200
    assert status["state"] == "awaiting_decision" and end >= max(status["completed_at"], seen)
    held = launch_hold(camp, conn, now=end + 7199)
    assert held.held and not held.wait_ended and "continues by itself 2 h after" in held.reason
    ended = launch_hold(camp, conn, now=end + 7200)
    assert ended.wait_ended
    out = continue_after_wait(camp, conn, now=end + 7200)
    assert out["note"] == "no decision within 2 h: continued" and out["who"] == "runner"
    assert launch_hold(camp, conn).held is False  # decided: launches go on
    assert pilot_status(camp, conn)["decision"]["how"] == "wait_ended"


def test_cut_drops_only_what_has_not_run(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="finished")
    add_run(conn, camp, "rank16", config_hash="22222222", state="finished")  # ran: not droppable
    add_run(conn, camp, "rank64", config_hash="33333333", state="queued", checkpoint=False)
    out = record_decision(conn, camp, "cut", ["control"], None, "ana@host (shell)", how="shell")
    assert out["dropped"] == ["rank64"] and out["already_ran"] == ["rank16"]
    row = conn.execute("SELECT dropped, how FROM decisions").fetchone()
    assert json.loads(row["dropped"]) == ["rank64"] and row["how"] == "shell"
    from runner.closing.report import build_report

    report = build_report(camp, conn)
    notes = {r["name"]: r["note"] for r in report.to_json()["planned_vs_actual"]}
    assert "cut at the pilot decision" in notes["rank64"] and "cut" not in notes["rank16"]
    assert any("cut to control (dropped rank64)" in line for line in report.decision_lines())


def test_without_a_pilot_phase_a_variant_started_by_hand_keeps_the_pilot_open(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    text = camp.path.read_text().replace('variants = ["control", "rank16", "rank64"]', 'variants = ["control"]')
    camp.path.write_text(text)
    camp = load_campaign(camp.root)
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", state="running")
    add_run(conn, camp, "rank16", config_hash="22222222", state="queued", checkpoint=False)  # `campaign start`
    status = pilot_status(camp, conn)
    assert status["state"] == "running"
    assert [v["variant"] for v in status["variants"]] == ["control", "rank16"]
    assert launch_hold(camp, conn).held is False


def test_decide_arguments():
    assert split_decide_args(["continue"]) == (None, "continue", [])
    assert split_decide_args(["camp", "cut", "a", "b"]) == ("camp", "cut", ["a", "b"])
    assert split_decide_args(["Revisit"]) == (None, "revisit", [])
    from runner.campaign.errors import CampaignError

    for bad in (["cut"], ["continue", "a"], ["camp", "stop"], []):
        with pytest.raises(CampaignError):
            split_decide_args(bad)


def test_decide_with_an_undeclared_variant_exits_2_and_records_nothing(tmp_path, capsys):
    camp = make_campaign(tmp_path / "camp")
    assert cli_main(["decide", str(camp.root), "cut", "rank999"]) == 2
    assert "not declared in the campaign file: rank999" in capsys.readouterr().err
    assert not paths_for(camp).ledger.exists()


def test_status_text_and_console_banner_show_the_hold_and_its_end():
    import datetime as dt

    from console.pilot_view import banner_text
    from runner.cli.daemon_cmds import render_status

    now = time.time()
    pilot = {"state": "awaiting_decision", "basis": "the phase 'pilot' ended", "continues_at": now + 3750.0}
    pilot |= {"estimate": {"remaining_hours": 3.0, "fits": True, "spare_hours": 10.0}}
    snap = {
        "campaign": {"name": "t"},
        "bundle": {"provider": "P", "gpu": "G", "plan": "3d", "expires_at": "x", "remaining_seconds": 1.0}
        | {"retrieve_by": "y", "retrieve_seconds": 1.0, "warning": "ok"},
        "runs": [],
        "queue": ["c", "d"],
        "pilot": pilot,
    }
    text = render_status(snap)
    end = dt.datetime.fromtimestamp(now + 3750.0, dt.UTC).strftime("%H:%M UTC")
    assert f"launches held for the decision until {end} (in 1h 02m)" in text
    assert "campaign decide continue | cut VARIANT... | revisit" in text
    banner = banner_text(pilot, now, dt.UTC).plain
    assert f"launches held until {end[:5]}" in banner and "(1h 02m), then the runner continues by itself" in banner
