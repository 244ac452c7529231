"""The pilot decision holds the line at its edges, with a real runner: a decision asked for before the
pilot is over, a runner that was down while the pilot ended or while the wait for a decision ran out,
and the `campaign decide` that starts it again."""

from __future__ import annotations

import time

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.daemon import client, control
from runner.ledger import store as L
from tests.helpers_runner import wait_for, write_campaign

PHASES = """
[[phase]]
name = "pilot"
variants = ["a", "b"]

[[phase]]
name = "main runs"
variants = ["c", "d"]
"""


def _campaign(camp, wait: str, pilot_steps: int = 10):
    variants = [{"name": n, "n": pilot_steps if n in "ab" else 5, "delay": 0.1} for n in "abcd"]
    path = write_campaign(camp, variants, phase=[])
    path.write_text(path.read_text() + PHASES + f'\n[pilot]\nwait = "{wait}"\n')
    return load_campaign(camp)


def _read(c, sql: str) -> list[dict]:
    conn = L.connect(paths_for(c).ledger, readonly=True)
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def _runs(c) -> dict[str, dict]:
    return {r["variant"]: r for r in _read(c, "SELECT * FROM runs")}


def _pilot_state(c) -> str | None:
    return (client.request(c, "status").get("pilot") or {}).get("state")


def _pilot_runs_exited(c) -> bool:
    return all(any((c.root / "runs").glob(f"{v}-*/exit.json")) for v in "ab")


@pytest.mark.slow
def test_a_decision_before_the_pilot_is_over_is_refused_and_nothing_launches_early(camp, monkeypatch, capsys):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "3")  # a slot free for `c` while the pilot runs
    c = _campaign(camp, "1h", pilot_steps=30)
    control.up(c)
    wait_for(lambda: {r["state"] for v, r in _runs(c).items() if v in "ab"} == {"running"}, what="the pilot runs")
    capsys.readouterr()
    assert cli_main(["decide", str(camp), "cut", "c"]) == 2  # refused as bad input
    err = capsys.readouterr().err
    assert "the pilot is not over: the phase 'pilot' ends when its variants have ended; waiting for a (running)" in err
    assert "nothing was recorded" in err
    assert _read(c, "SELECT * FROM decisions") == []
    wait_for(lambda: _pilot_state(c) == "awaiting_decision", what="the pilot's end", timeout=30)
    runs = _runs(c)
    assert runs["c"]["launched_at"] is None and runs["d"]["launched_at"] is None  # held all along
    assert cli_main(["decide", str(camp), "cut", "c"]) == 0
    (decision,) = _read(c, "SELECT * FROM decisions")
    runs = wait_for(lambda: (lambda r: r if r["c"]["launched_at"] else None)(_runs(c)), what="c to launch")
    assert runs["c"]["launched_at"] >= decision["t"] >= max(runs[v]["ended_at"] for v in "ab")
    assert runs["d"]["launched_at"] is None and runs["d"]["cut_by_decision"] == 1


@pytest.mark.slow
def test_a_decision_that_starts_the_runner_after_the_wait_ran_out_is_the_one_recorded(camp, capsys):
    c = _campaign(camp, "3s")
    control.up(c)
    wait_for(lambda: _pilot_state(c) == "awaiting_decision", what="the pilot's end", timeout=30)
    control.down(c)
    time.sleep(3.5)  # the wait runs out while the runner is down
    assert not control.is_running(c)
    assert cli_main(["decide", str(camp), "cut", "c"]) == 0  # starts the runner, then decides
    assert "dropped from the queue: d" in capsys.readouterr().out
    runs = wait_for(lambda: (lambda r: r if r["c"]["state"] == "finished" else None)(_runs(c)), what="c to finish")
    decisions = _read(c, "SELECT who, how, choice, dropped FROM decisions")
    assert [(d["how"], d["choice"], d["dropped"]) for d in decisions] == [("shell", "cut", '["d"]')]
    assert runs["d"]["launched_at"] is None and runs["d"]["state"] == "aborted"


@pytest.mark.slow
def test_a_pilot_that_ended_while_the_runner_was_down_waits_from_when_it_came_back(camp):
    c = _campaign(camp, "3s")
    control.up(c)
    wait_for(lambda: {r["state"] for v, r in _runs(c).items() if v in "ab"} == {"running"}, what="the pilot runs")
    control.down(c)  # the runs go on without it
    wait_for(lambda: _pilot_runs_exited(c), what="the pilot runs to end", timeout=30)
    time.sleep(3.5)  # longer than the wait, counted from the pilot's end
    back = time.time()
    control.up(c)
    pilot = wait_for(
        lambda: (lambda p: p if p and p["state"] == "awaiting_decision" else None)(
            client.request(c, "status").get("pilot")
        ),
        what="the held launches",
        timeout=10,
    )
    assert pilot["continues_at"] >= back + 3.0 > pilot["completed_at"] + 3.0  # the user gets the whole wait
    assert _read(c, "SELECT * FROM decisions") == []
    assert {v: r["launched_at"] for v, r in _runs(c).items() if v in "cd"} == {"c": None, "d": None}
    # then the wait runs out with the runner up: it continues by itself, and says so once
    wait_for(lambda: _runs(c)["c"]["launched_at"], what="the runner to continue", timeout=15)
    (decision,) = _read(c, "SELECT * FROM decisions")
    assert decision["how"] == "wait_ended" and decision["t"] >= back + 3.0


def test_status_words_a_decision_as_the_report_and_the_console_do():
    from console.pilot_view import decision_words as console_words
    from runner.cli.daemon_cmds import render_status

    decision = {"t": time.time(), "who": "ana@gpu (shell)", "how": "shell", "choice": "cut"}
    decision |= {"variants": ["c", "d"], "dropped": ["e"], "note": "e cannot change the answer"}
    snap = {
        "campaign": {"name": "t"},
        "bundle": {"provider": "P", "gpu": "G", "plan": "3d", "expires_at": "x", "remaining_seconds": 1.0}
        | {"retrieve_by": "y", "retrieve_seconds": 1.0, "warning": "ok"},
        "runs": [],
        "queue": [],
        "pilot": {"state": "decided", "decision": decision},
    }
    words = "cut to c, d (dropped e): e cannot change the answer"
    assert f"pilot decided by ana@gpu (shell): {words}" in render_status(snap)
    assert console_words(decision) == words
