"""Warnings that reach the user: the runner sends them through Apprise to a loopback JSON endpoint.
A rule stop arrives within 5 s; a dead endpoint delays nothing and shows as failing; retries back
off; each expiry level is sent once, across restarts; `campaign notify-test` reports per URL."""

from __future__ import annotations

import time

from runner.campaign.model import load_campaign
from runner.cli import main
from runner.daemon.alerts import Alerts
from runner.daemon.notify import Event, Message, Notifier
from runner.ledger import store as L
from tests.helpers_notify import Inbox, SilentPort
from tests.helpers_runner import wait_for, write_campaign


def add_notify(path, urls: list[str], events: list[str] | None = None) -> None:
    text = path.read_text() + "\n[notify]\nurls = [" + ", ".join(f'"{u}"' for u in urls) + "]\n"
    if events is not None:
        text += "events = [" + ", ".join(f'"{e}"' for e in events) + "]\n"
    path.write_text(text)


def test_a_rule_stop_arrives_within_5_s_and_a_dead_endpoint_delays_nothing(camp, capsys):
    from runner.daemon import client, control

    inbox, dead = Inbox(), SilentPort()
    try:
        path = write_campaign(camp, [{"name": "boom", "n": 400, "delay": 0.05, "nan_at": 20}])
        add_notify(path, [dead.url, inbox.url])  # the dead one first
        c = load_campaign(path)
        control.up(c)
        got = wait_for(lambda: inbox.find("stopped by a rule"), 30, "the rule stop to arrive")
        conn = L.connect(L_path(c), readonly=True)
        try:
            verdict = L.last_event(conn, "verdict")
        finally:
            conn.close()
        assert verdict is not None
        print(f"rule stop arrived {got[0] - verdict['t']:.2f} s after the rule fired")
        assert got[0] - verdict["t"] < 5.0, f"arrived {got[0] - verdict['t']:.1f} s after the rule fired"
        assert "boom-" in got[1]["title"] and "nan" in got[1]["message"].lower()
        failing = wait_for(
            lambda: client.request(c, "status")["runner"]["notify"]["failing"], 30, "the dead endpoint shown failing"
        )
        assert failing[0]["url"] == f"json://127.0.0.1:{dead.port}" and failing[0]["error"]
        assert client.request(c, "status")["runner"]["notify"]["sent"] >= 1
        assert main(["status", str(c.root)]) == 0
        assert f"FAILING json://127.0.0.1:{dead.port}" in capsys.readouterr().out
    finally:
        inbox.close()
        dead.close()


def L_path(c):  # noqa: N802 (reads as the ledger's path)
    from runner.campaign.statedir import paths_for

    return paths_for(c).ledger


def test_retries_back_off_and_the_last_failure_is_kept():
    calls: list[float] = []

    def flaky(url: str, message: Message) -> str | None:
        calls.append(time.monotonic())
        return None if len(calls) >= 3 else "connection refused"

    from runner.campaign.objects import Notify

    n = Notifier(Notify(urls=("json://x/y",)), sender=flaky, backoff=(0.2, 0.4), attempts=5)
    assert n.post(Message(Event.RULE_STOP, "t", "b"))
    outcomes = wait_for(lambda: [o for o in (n.drain() or []) if o.ok] or None, 10, "the third attempt")
    assert outcomes[0].attempts == 3 and len(calls) == 3
    assert calls[1] - calls[0] >= 0.2 and calls[2] - calls[1] >= 0.4
    assert n.state()["failing"] == [] and n.state()["sent"] == 1
    assert n.post(Message(Event.TEST, "t", "b"))  # a test message always goes
    n.stop()


def test_each_expiry_level_is_sent_once_across_restarts(tmp_path):
    path = write_campaign(tmp_path / "c", [{"name": "a"}], started_at=time.time() - 3 * 86400 + 3 * 3600)
    add_notify(path, ["json://127.0.0.1:9/x"], events=["expiry"])
    c = load_campaign(path)
    posted: list[Message] = []
    ledger = L.Ledger(tmp_path / "ledger.sqlite")

    def alerts() -> Alerts:
        n = Notifier(c.notify, sender=lambda url, m: None)
        n.post = lambda m: posted.append(m) or True  # type: ignore[method-assign]
        return Alerts(c, ledger, n)

    a = alerts()
    now = time.time()
    a.tick(now)
    a.tick(now + 1)
    assert [m.title for m in posted] == [f"[{c.name}] rental warning"]
    assert "campaign pull" in posted[0].body
    alerts().tick(now + 2)  # a restarted runner: the ledger remembers
    assert len(posted) == 1
    retrieve_by = c.bundle.retrieve_by.timestamp()
    ledger.event("retrieval_verified", files=3, bytes=10, to="me@laptop", dest="/x")
    alerts().tick(retrieve_by + 60)
    assert [m.title.rsplit(" ", 1)[-1] for m in posted] == ["warning", "critical"]
    assert "retrieved and verified" in posted[1].body and "campaign pull" not in posted[1].body
    ledger.close()


def test_an_expiry_level_is_not_used_up_while_expiry_is_not_among_the_events(tmp_path):
    """Notifying only rule stops, the warning level passes unsent and unrecorded; with `expiry`
    added to the events (a runner started again with the edited file) it is sent then."""
    path = write_campaign(tmp_path / "c", [{"name": "a"}], started_at=time.time() - 3 * 86400 + 3 * 3600)
    text = path.read_text()
    add_notify(path, ["json://127.0.0.1:9/x"], events=["rule_stop"])
    ledger = L.Ledger(tmp_path / "ledger.sqlite")
    posted: list[Message] = []

    def alerts(c) -> Alerts:
        n = Notifier(c.notify, sender=lambda url, m: None)
        n.post = lambda m: posted.append(m) or True  # type: ignore[method-assign]
        return Alerts(c, ledger, n)

    now = time.time()
    alerts(load_campaign(path)).tick(now)
    assert posted == [] and L.last_event(ledger.conn, "expiry_notified") is None
    path.write_text(text)
    add_notify(path, ["json://127.0.0.1:9/x"], events=["rule_stop", "expiry"])
    alerts(load_campaign(path)).tick(now + 1)
    assert [m.title.rsplit(" ", 1)[-1] for m in posted] == ["warning"]
    ledger.close()


def test_notify_test_reports_each_url(tmp_path, capsys):
    inbox = Inbox()
    try:
        path = write_campaign(tmp_path / "c", [{"name": "a"}])
        assert main(["notify-test", str(path)]) == 2
        assert "no [notify] table" in capsys.readouterr().err
        add_notify(path, [inbox.url])
        assert main(["notify-test", str(path)]) == 0
        assert f"sent     json://127.0.0.1:{inbox.port}" in capsys.readouterr().out
        assert inbox.find("test message")
        path.write_text(path.read_text().replace(inbox.url, f'{inbox.url}", "json://127.0.0.1:1/refused'))
        assert main(["notify-test", str(path)]) == 1
        assert "FAILED   json://127.0.0.1:1" in capsys.readouterr().out
    finally:
        inbox.close()


def test_the_pull_command_in_a_warning_pastes_as_is_for_a_folder_with_spaces(tmp_path, monkeypatch):
    import shlex

    from runner.cli.daemon_cmds import render_status

    monkeypatch.setenv("CAMPAIGN_SSH_HOST", "me@gpu")
    path = write_campaign(tmp_path / "my camp", [{"name": "a"}], started_at=time.time() - 3 * 86400 + 3 * 3600)
    add_notify(path, ["json://127.0.0.1:9/x"], events=["expiry"])
    c = load_campaign(path)
    posted: list[Message] = []
    ledger = L.Ledger(tmp_path / "ledger.sqlite")
    n = Notifier(c.notify, sender=lambda url, m: None)
    n.post = lambda m: posted.append(m) or True  # type: ignore[method-assign]
    Alerts(c, ledger, n).tick()
    ledger.close()
    command = posted[0].body.split("on your machine: ", 1)[1].split("\n")[0]
    assert shlex.split(command) == ["campaign", "pull", f"me@gpu:{c.root}"]
    snap = {
        "campaign": {"name": "t"},
        "bundle": {"provider": "P", "gpu": "G", "plan": "3d", "expires_at": "x", "remaining_seconds": 3000.0}
        | {"retrieve_by": "y", "retrieve_seconds": -66.0, "warning": "critical"},
        "runs": [],
        "queue": [],
    }
    assert "retrieve by y (passed 1m 06s ago) [critical]" in render_status(snap)


def test_no_pilot_decision_is_asked_for_once_the_wrap_up_has_started(tmp_path):
    from tests.helpers_report import add_run, make_campaign

    camp = make_campaign(tmp_path / "camp")
    add_notify(camp.path, ["json://127.0.0.1:9/x"], events=["pilot_waiting"])
    camp = load_campaign(camp.root)
    ledger = L.Ledger(camp.state_dir / "ledger.sqlite")
    for name, h in (("control", "11111111"), ("rank16", "22222222"), ("rank64", "33333333")):
        add_run(ledger.conn, camp, name, config_hash=h, state="running")  # the pilot is over
    posted: list[Message] = []

    def alerts(wrapping: bool) -> Alerts:
        n = Notifier(camp.notify, sender=lambda url, m: None)
        n.post = lambda m: posted.append(m) or True  # type: ignore[method-assign]
        return Alerts(camp, ledger, n, wrapping_up=lambda: wrapping)

    alerts(True).tick()  # the wrap-up holds every launch: "decide" would be noise at 2 a.m.
    assert posted == []
    alerts(False).tick()
    assert [m.title for m in posted] == [f"[{camp.name}] pilot decision waiting"]
    ledger.close()


def test_a_wait_shorter_than_the_checks_still_tells_the_user_and_a_decision_ends_the_checks(tmp_path, monkeypatch):
    """With `[pilot] wait` under the 5 s between checks the runner may continue before the waiting
    notice goes out: the user is told it continued without them. Once a decision is recorded the
    pilot's status (it reads every run) is not computed again."""
    from runner.closing import pilot
    from tests.helpers_report import add_run, make_campaign

    camp = make_campaign(tmp_path / "camp")
    add_notify(camp.path, ["json://127.0.0.1:9/x"], events=["pilot_waiting"])
    camp = load_campaign(camp.root)
    ledger = L.Ledger(camp.state_dir / "ledger.sqlite")
    for name, h in (("control", "11111111"), ("rank16", "22222222"), ("rank64", "33333333")):
        add_run(ledger.conn, camp, name, config_hash=h, state="running")
    posted: list[Message] = []
    n = Notifier(camp.notify, sender=lambda url, m: None)
    n.post = lambda m: posted.append(m) or True  # type: ignore[method-assign]
    a = Alerts(camp, ledger, n)
    ledger.listeners.append(a.on_event)
    calls: list[float] = []
    status = pilot.pilot_status
    monkeypatch.setattr(pilot, "pilot_status", lambda *args, **kw: calls.append(1) or status(*args, **kw))

    out = pilot.continue_after_wait(camp, ledger.conn)  # the runner's own decision, as launcher.py records it
    ledger.announce(
        {"t": out["t"], "run_id": None, "kind": "decision", "choice": "continue"}
        | {"how": out["how"], "note": out["note"]}
    )
    assert [m.title for m in posted] == [f"[{camp.name}] pilot over: continued without a decision"]
    assert "no decision within" in posted[0].body
    now = time.time()
    for i in range(3):
        a.tick(now + 10 * i)
    assert calls == [] and len(posted) == 1  # decided: nothing more to ask, nothing more read
    restarted = Alerts(camp, ledger, n)  # after a restart: one look, then no more
    for i in range(3):
        restarted.tick(now + 10 * i)
    assert len(calls) <= 1 and len(posted) == 1
    ledger.close()
