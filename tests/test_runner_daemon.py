"""The runner with real processes: up/down, permissions, the socket, start/abort/resume, refusal near
expiry, SIGKILL and re-adoption, SIGHUP, and a connection from another user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from runner.campaign.model import load_campaign
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.daemon import client, control
from runner.daemon.async_client import AsyncClient
from runner.ledger import store as L
from tests.helpers_runner import kill_processes_under, run_of, wait_for, write_campaign

pytestmark = pytest.mark.slow


def status(c) -> dict:
    return client.request(c, "status")


def ledger_ro(c):
    return L.connect(paths_for(c).ledger, readonly=True)


def test_up_is_idempotent_and_down_stops_it(camp, capsys):
    write_campaign(camp, [{"name": "a", "n": 5}], phase=[])
    c = load_campaign(camp)
    first = control.up(c)
    assert first.started and first.pid
    again = control.up(c)
    assert not again.started and again.pid == first.pid
    assert cli_main(["up", str(camp)]) == 0
    assert "already running" in capsys.readouterr().out

    paths = paths_for(c)
    assert stat.S_IMODE(paths.dir.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(paths.socket.stat().st_mode)
    assert stat.S_IMODE(paths.socket.stat().st_mode) == 0o600
    info = json.loads(paths.pid.read_text())
    assert info["pid"] == first.pid and control.is_our_runner(info, paths)

    # a second runner for the same folder gives way to the one holding the lock
    second = subprocess.run([sys.executable, "-m", "runner.daemon.server", str(c.path)], timeout=60)
    assert second.returncode == 0
    assert client.ping(c)["pid"] == first.pid
    assert "not starting a second one" in paths.log.read_text()

    down = control.down(c)
    assert down.was_running
    assert not control.is_running(c) and not control.lock_is_held(paths)
    assert not paths.socket.exists() and not paths.pid.exists()
    assert psutil.pid_exists(first.pid) is False or psutil.Process(first.pid).status() == psutil.STATUS_ZOMBIE
    assert cli_main(["down", str(camp)]) == 0
    assert "not running" in capsys.readouterr().out
    assert cli_main(["status", str(camp), "--json"]) == 0  # read from the ledger, runner down
    offline = json.loads(capsys.readouterr().out)
    assert offline["runner"] is None and "not running" in offline["runner_error"]
    assert offline["bundle"]["warning"] == "ok" and offline["runs"] == []

    third = control.up(c)
    assert third.started and third.pid != first.pid
    conn = ledger_ro(c)
    kinds = [e["kind"] for e in L.events(conn, limit=100)]
    conn.close()
    assert kinds.count("runner_start") == 2 and kinds.count("runner_stop") == 1


def test_socket_answers_bad_requests_without_dying(camp, capsys):
    write_campaign(camp, [{"name": "a", "n": 5}], phase=[])
    c = load_campaign(camp)
    control.up(c)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(str(paths_for(c).socket))
    f = s.makefile("rwb")

    def send(raw: bytes) -> dict:
        f.write(raw + b"\n")
        f.flush()
        return json.loads(f.readline())

    r = send(b'{"id": 1, "op": "launch_missiles"}')
    assert r == {"id": 1, "ok": False, "error": r["error"], "code": "bad_request"} and "unknown op" in r["error"]
    assert "not JSON" in send(b"{not json")["error"]
    assert "JSON object" in send(b"[1, 2]")["error"]
    assert "needs variant" in send(b'{"id": 2, "op": "start"}')["error"]
    r = send(b'{"id": 3, "op": "start", "variant": "nope"}')
    assert r["ok"] is False and r["code"] == "bad_input" and "not declared" in r["error"]
    r = send(b'{"id": 4, "op": "start", "variant": "a; rm -rf /"}')
    assert r["ok"] is False and r["code"] == "bad_input"
    r = send(b'{"id": 5, "op": "ping"}')  # the same connection still works
    assert r["ok"] and r["result"]["pong"] and r["id"] == 5
    s.close()

    assert cli_main(["start", str(camp), "nope"]) == 2
    assert "not declared" in capsys.readouterr().err
    assert client.ping(c) is not None


def test_start_abort_resume_and_no_double_count(camp, capsys):
    write_campaign(
        camp, [{"name": "long", "n": 2000, "delay": 0.02}, {"name": "short", "n": 3, "delay": 0.01}], phase=[]
    )
    c = load_campaign(camp)
    control.up(c)
    assert cli_main(["start", str(camp), "long"]) == 0
    out = capsys.readouterr().out
    rid = out.split(":")[0].strip()
    assert rid.startswith("long-") and len(rid.split("-")[1]) == 8
    wait_for(lambda: ((run_of(status(c), "long") or {}).get("step") or 0) >= 3, what="long to report steps")

    assert cli_main(["abort", str(camp), rid, "--reason", "testing abort"]) == 0
    run = wait_for(
        lambda: (lambda r: r if r["ended_at"] else None)(run_of(status(c), "long")), what="the aborted run to end"
    )
    assert run["state"] == "aborted" and run["stop_reason"] == "testing abort"
    run_dir = Path(run["run_dir"])
    assert json.loads((run_dir / "abort.json").read_text())["reason"] == "testing abort"
    assert json.loads((run_dir / "exit.json").read_text())["killed_by"] == "abort"

    # the same configuration again is not a new run: resume it instead
    assert cli_main(["start", str(camp), "long"]) == 2
    assert "campaign resume" in capsys.readouterr().err
    res = client.request(c, "resume", run=rid)
    assert res["run"] == rid and res["state"] in ("queued", "running")
    wait_for(
        lambda: (run_of(status(c), "long") or {}).get("metrics", {}).get("attempt") == 2,
        what="the resumed attempt's metrics",
    )
    snap_run = run_of(status(c), "long")
    assert snap_run["attempts"] == 2 and snap_run["state"] == "running"
    assert client.request(c, "abort", run=rid, reason="done")["state"] == "aborted"

    # a finished configuration is never re-run under the same id
    assert cli_main(["start", str(camp), "short"]) == 0
    capsys.readouterr()
    wait_for(lambda: (run_of(status(c), "short") or {}).get("state") == "finished", what="short to finish")
    assert cli_main(["start", str(camp), "short"]) == 2
    assert "already finished" in capsys.readouterr().err
    text = (camp / "campaign.toml").read_text().replace('"steps.py", "3"', '"steps.py", "4"')
    (camp / "campaign.toml").write_text(text)
    assert cli_main(["start", str(camp), "short"]) == 0
    new_id = capsys.readouterr().out.split(":")[0]
    ids = [r["id"] for r in status(c)["runs"] if r["variant"] == "short"]
    assert len(ids) == 2 and new_id in ids

    conn = ledger_ro(c)
    kinds = [e["kind"] for e in L.events(conn, run_id=rid, limit=100)]
    conn.close()
    for k in ("queued", "launched", "aborted", "resume_requested", "resumed"):
        assert k in kinds, (k, kinds)


def test_run_that_cannot_finish_before_retrieval_is_refused(camp, capsys):
    # the window closes in 2.5 h; retrieval takes 2 h: half an hour is left for a 1 h run
    write_campaign(camp, [{"name": "a", "n": 5, "hours": 1}], phase=[], started_at=time.time() - 3 * 86400 + 2.5 * 3600)
    c = load_campaign(camp)
    control.up(c)
    assert cli_main(["start", str(camp), "a"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "needs 1 h" in err
    run = run_of(status(c), "a")
    assert run["state"] == "refused" and "retrieval deadline" in run["stop_reason"]
    assert not (Path(run["run_dir"]) / "launch.json").exists()
    conn = ledger_ro(c)
    ev = [e for e in L.events(conn, run_id=run["id"]) if e["kind"] == "refused"]
    conn.close()
    assert ev and "needs 1 h" in ev[0]["reason"]
    assert cli_main(["status", str(camp)]) == 0
    assert "refused" in capsys.readouterr().out


def test_sigkill_runner_then_up_readopts_live_runs(camp):
    n = 800
    write_campaign(
        camp, [{"name": "a", "n": n, "delay": 0.03}, {"name": "b", "n": n, "delay": 0.03, "category": "useful"}]
    )
    c = load_campaign(camp)
    first = control.up(c)
    both = lambda: all(((run_of(status(c), v) or {}).get("step") or 0) >= 10 for v in ("a", "b"))  # noqa: E731
    wait_for(both, what="both runs to report")
    before = status(c)
    sup_pids = {r["variant"]: r["pid"] for r in before["runs"]}
    os.kill(first.pid, signal.SIGKILL)
    wait_for(
        lambda: not psutil.pid_exists(first.pid) or psutil.Process(first.pid).status() == "zombie",
        what="the runner to die",
    )
    assert not control.is_running(c)
    # the runs go on without it
    grown = lambda: all(  # noqa: E731
        sum(1 for _ in open(Path(r["run_dir"]) / "metrics.jsonl")) > (r["step"] or 0) + 20 for r in before["runs"]
    )
    wait_for(grown, what="the runs to keep writing while the runner is down")
    assert all(psutil.pid_exists(p) for p in sup_pids.values() if p)

    second = control.up(c)
    assert second.started and second.pid != first.pid
    snap = status(c)
    assert {r["state"] for r in snap["runs"]} == {"running"}
    wait_for(lambda: all(r["state"] == "finished" for r in status(c)["runs"]), timeout=120, what="both runs to finish")
    snap = status(c)
    conn = ledger_ro(c)
    prog = L.progress(conn)
    for r in snap["runs"]:
        assert r["step"] == n - 1
        assert prog[r["id"]]["lines"] == n and prog[r["id"]]["bad_lines"] == 0
        kinds = [e["kind"] for e in L.events(conn, run_id=r["id"], limit=100)]
        assert kinds[:2] == ["queued", "launched"] and "adopted" in kinds and kinds[-1] == "finished"
    conn.close()


def test_sighup_to_the_launching_session_does_not_stop_the_runner(camp):
    write_campaign(camp, [{"name": "a", "n": 5}], phase=[])
    c = load_campaign(camp)
    # a stand-in for the SSH session: a shell in its own session that starts the runner, then
    # hangs up its whole process group the way a closing terminal does
    sh = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m runner up "{camp}" && kill -HUP 0'],
        start_new_session=True,
        timeout=90,
        cwd=str(camp),
    )
    assert sh.returncode in (0, -signal.SIGHUP, 128 + signal.SIGHUP)
    pong = wait_for(lambda: client.ping(c), what="the runner to answer")
    runner = psutil.Process(pong["pid"])
    assert os.getsid(runner.pid) != os.getsid(0)
    assert runner.terminal() is None
    os.kill(runner.pid, signal.SIGHUP)  # and a hang-up sent to it directly is ignored
    time.sleep(0.5)
    assert client.ping(c)["pid"] == pong["pid"]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"),
    reason="needs root and useradd to make a second user",
)
def test_connection_from_another_user_is_refused(monkeypatch):
    user = "campaigntest"
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        r = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], capture_output=True, text=True
        )
        if r.returncode != 0:
            pytest.skip(f"useradd failed: {r.stderr}")
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    base = Path(tempfile.mkdtemp(prefix="campaign-uid-"))
    try:
        os.chmod(base, 0o755)
        root = base / "camp"
        write_campaign(root, [{"name": "a", "n": 5}], phase=[])
        os.chmod(root, 0o755)
        c = load_campaign(root)
        control.up(c)
        paths = paths_for(c)
        # open the permissions the folder normally closes, so only the uid check stands
        os.chmod(paths.dir, 0o755)
        os.chmod(paths.socket, 0o777)
        # the runner may answer and hang up before the request is sent: a broken pipe is fine
        code = (
            "import socket,sys;s=socket.socket(socket.AF_UNIX);s.settimeout(20);s.connect(sys.argv[1])\n"
            'try: s.sendall(b\'{"id":1,"op":"status"}\\n\')\n'
            "except BrokenPipeError: pass\n"
            "print(s.makefile().readline())"
        )
        out = subprocess.run(
            ["runuser", "-u", user, "--", "/usr/bin/python3", "-I", "-c", code, str(paths.socket)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        assert reply["ok"] is False and "refused" in reply["error"]
        assert "refused a connection from uid" in paths.log.read_text()
        assert client.ping(c) is not None  # the owner still gets in
        os.chmod(paths.dir, 0o700)
        control.down(c)
    finally:
        kill_processes_under(base)
        shutil.rmtree(base, ignore_errors=True)


async def test_async_client_requests_and_subscription(camp):
    write_campaign(camp, [{"name": "a", "n": 60, "delay": 0.02}], phase=[])
    c = load_campaign(camp)
    control.ensure_running(c)
    ac = AsyncClient(c, timeout=30)
    assert (await ac.request("ping"))["pong"] is True
    events = ac.subscribe()
    first = await events.__anext__()
    assert first["event"] == "status" and first["data"]["campaign"]["name"] == "t"
    started = await ac.request("start", variant="a")
    kinds = set()
    async for ev in events:
        if ev["event"] == "log":
            kinds.add(ev["data"]["kind"])
        if "finished" in kinds:
            break
    assert {"queued", "launched", "finished"} <= kinds
    with pytest.raises(Exception, match="not declared"):
        await ac.request("start", variant="zzz")
    await events.aclose()
    await ac.close()
    # the client survives a runner restart: the next request reconnects
    control.down(c)
    control.up(c)
    assert (await ac.request("status"))["runs"][0]["id"] == started["run"]
    await ac.close()


def test_rule_stop_is_recorded_with_rule_value_and_step(camp):
    write_campaign(camp, [{"name": "a", "n": 2000, "delay": 0.01, "nan_at": 30}], phase=[])
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    run = wait_for(
        lambda: (lambda r: r if r and r["state"] == "stopped" else None)(run_of(status(c), "a")),
        what="the run to be stopped by its rule",
    )
    assert run["id"] == rid and run["stop_rule"] == "nonfinite" and run["stop_value"] == "nan"
    assert run["loss"] == "nan" and run["ended_at"]
    assert [r for r in run["rules"] if r["kind"] == "nonfinite"][0]["state"] == "fired"
    conn = ledger_ro(c)
    row = L.get_run(conn, rid)
    verdicts = [e for e in L.events(conn, run_id=rid) if e["kind"] == "verdict"]
    conn.close()
    assert row.stop_step == 30 and row.state == "stopped"
    assert verdicts and verdicts[0]["rule"] == "nonfinite" and verdicts[0]["step"] == 30


PRINTER = r"""
import signal, sys, time
asked = 0
def on_usr1(signum, frame):
    global asked
    asked = 1
signal.signal(signal.SIGUSR1, on_usr1)
for i in range(int(sys.argv[1])):
    print(f"iter {i}: loss {2.0 / (i + 1):.4f} ck {asked}", flush=True)
    time.sleep(0.02)
"""


def test_unmodified_script_checkpoint_signal_detail_and_decision(camp):
    regex = r"iter (?P<step>\d+): loss (?P<loss>\S+) ck (?P<ck>\d)"
    write_campaign(camp, [{"name": "plain", "n": 3000, "extra": f"metrics_regex = '{regex}'\n"}], phase=[])
    (camp / "printer.py").write_text(PRINTER)
    text = (camp / "campaign.toml").read_text().replace('"steps.py"', '"printer.py"')
    (camp / "campaign.toml").write_text(text.replace('"printer.py", "3000", "0.05"', '"printer.py", "3000"'))
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="plain")["run"]
    wait_for(lambda: ((run_of(status(c), "plain") or {}).get("step") or 0) >= 5, what="regex metrics")
    run = run_of(status(c), "plain")
    assert isinstance(run["loss"], float) and run["metrics"]["ck"] == 0
    assert client.request(c, "checkpoint", run=rid) == {"run": rid, "signalled": True}
    wait_for(lambda: run_of(status(c), "plain")["metrics"].get("ck") == 1, what="SIGUSR1 to reach the script")
    detail = client.request(c, "run_detail", run=rid)
    assert detail["run"]["id"] == rid and detail["config"]["variant"]["metrics_regex"] == regex
    assert any(line.startswith("iter ") for line in detail["log_tail"])
    assert [e["kind"] for e in detail["events"]][:2] == ["queued", "launched"]
    with pytest.raises(Exception, match="the pilot is not over"):  # its one run is still going
        client.request(c, "decide", choice="continue", variants=[], note="too early", who="test")
    client.request(c, "abort", run=rid, reason="enough")
    wait_for(lambda: run_of(status(c), "plain")["state"] == "aborted", what="the abort")
    decided = client.request(c, "decide", choice="continue", variants=[], note="looks fine", who="test")
    assert decided["choice"] == "continue"
    assert client.request(c, "status")["events"][-1]["kind"] == "decision"
    with pytest.raises(Exception, match="choice"):
        client.request(c, "decide", choice="maybe", who="test")


def test_down_falls_back_to_sigterm_when_the_socket_is_gone(camp):
    write_campaign(camp, [{"name": "a", "n": 5}], phase=[])
    c = load_campaign(camp)
    pid = control.up(c).pid
    paths_for(c).socket.unlink()  # the socket is gone; the runner is not
    res = control.down(c, timeout=60)
    assert res.was_running and res.pid == pid and "SIGTERM" in res.message
    assert not control.lock_is_held(paths_for(c))
    # a pid file naming some other live process is never signalled
    paths_for(c).pid.write_text(json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()}))
    assert control.down(c).was_running is False


def test_a_command_that_cannot_start_fails_with_its_reason_and_frees_the_slot(camp):
    write_campaign(camp, [{"name": "broken", "n": 5}, {"name": "ok", "n": 3}], phase=[])
    text = (camp / "campaign.toml").read_text()
    first_cmd = text.index("command = [")
    text = text[:first_cmd] + 'command = ["./no-such-program"]\n' + text[text.index("\n", first_cmd) + 1 :]
    (camp / "campaign.toml").write_text(text)
    c = load_campaign(camp)
    control.up(c)
    client.request(c, "start", variant="broken")
    run = wait_for(
        lambda: (lambda r: r if r and r["state"] == "failed" else None)(run_of(status(c), "broken")),
        what="the broken run to fail",
    )
    assert "no-such-program" in run["stop_reason"]
    client.request(c, "start", variant="ok")
    wait_for(lambda: (run_of(status(c), "ok") or {}).get("state") == "finished", what="the next run to use the slot")
    assert status(c)["slots"]["busy"] == 0


def test_a_lost_supervisor_does_not_leave_its_run_unjudged(camp):
    """A supervisor killed with SIGKILL leaves the training process with nobody judging it: the
    runner marks the run failed, says why, and stops the orphaned process tree."""
    write_campaign(camp, [{"name": "a", "n": 5000, "delay": 0.02}])
    c = load_campaign(camp)
    control.up(c)
    run = wait_for(lambda: (r := run_of(status(c), "a")) and (r.get("step") or 0) >= 5 and r, what="the run to report")
    sup = json.loads((Path(run["run_dir"]) / "supervisor.json").read_text())
    child = psutil.Process(sup["child_pid"])
    os.kill(sup["pid"], signal.SIGKILL)
    ended = wait_for(
        lambda: (r := run_of(status(c), "a")) and r["state"] != "running" and r,
        timeout=60,
        what="the runner to notice the lost supervisor",
    )
    assert ended["state"] == "failed"
    assert "supervisor lost" in ended["stop_reason"] and "stopped" in ended["stop_reason"]
    wait_for(
        lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
        timeout=30,
        what="the orphaned training process to be stopped",
    )


def test_resume_after_a_lost_supervisor_starts_from_the_orphans_last_save(camp):
    """The orphan saves a checkpoint when the runner stops it, after its supervisor is gone:
    nobody verified that one, so the runner grades it before resuming instead of going back to an
    older verified checkpoint."""
    loop = Path(__file__).with_name("training_resume_loop.py")
    write_campaign(camp, [{"name": "a"}], phase=[])
    text = (
        (camp / "campaign.toml")
        .read_text()
        .replace('"steps.py", "20", "0.05"]', f'"{loop}", "--steps", "100000", "--step-sleep", "0.01", "--every", "2"]')
    )
    (camp / "campaign.toml").write_text(text)
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]

    def verified_in_ledger() -> bool:
        # any verified checkpoint: the newest one seen is often still waiting for its grading
        # (saving every 2 s outruns a grading that imports torch on a loaded machine)
        with ledger_ro(c) as conn:
            return any(ck["verified"] for ck in L.checkpoints(conn, rid))

    wait_for(verified_in_ledger, timeout=120, what="a verified checkpoint")
    run = run_of(status(c), "a")
    sup = json.loads((Path(run["run_dir"]) / "supervisor.json").read_text())
    child = psutil.Process(sup["child_pid"])
    os.kill(sup["pid"], signal.SIGKILL)
    wait_for(lambda: run_of(status(c), "a")["state"] == "failed", timeout=60, what="the lost supervisor noticed")
    wait_for(
        lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
        timeout=60,
        what="the orphan to save and exit",
    )
    ckpts = sorted((Path(run["run_dir"]) / "checkpoints").glob("ckpt-*.pt"))
    newest = ckpts[-1]
    assert not newest.with_name(newest.stem + ".verify.json").exists()  # nobody judged it
    client.request(c, "resume", run=rid)
    launch = wait_for(
        lambda: (j := json.loads((Path(run["run_dir"]) / "launch.json").read_text())) and j["attempt"] == 2 and j,
        timeout=120,
        what="the second attempt",
    )
    assert launch["resume_from"] == str(newest)
    assert json.loads(newest.with_name(newest.stem + ".verify.json").read_text())["verified"] is True
    client.request(c, "abort", run=rid, reason="done")


def test_status_since_a_seq_sends_what_changed_and_a_restart_sends_it_whole(camp):
    """What a poller over SSH asks (`runner.daemon.fleet_poll`): given the `seq` and `epoch` of a
    snapshot it holds, the runner answers with the runs changed since (none once they have ended);
    another runner's epoch, no epoch, or a seq it never reached get the whole snapshot."""
    write_campaign(camp, [{"name": "a", "n": 30, "delay": 0.02}, {"name": "b", "n": 5}], phase=["a", "b"])
    c = load_campaign(camp)
    control.up(c)
    whole = client.request(c, "status")
    assert whole["epoch"] and "since" not in whole
    wait_for(
        lambda: all(r["state"] == "finished" for r in client.request(c, "status")["runs"]) or None, 60, "both runs"
    )
    delta = client.request(c, "status", since=whole["seq"], epoch=whole["epoch"])
    assert delta["since"] == whole["seq"] and delta["epoch"] == whole["epoch"]
    assert {r["state"] for r in delta["runs"]} == {"finished"}  # each run's last change
    idle = client.request(c, "status", since=delta["seq"], epoch=delta["epoch"])
    assert idle["runs"] == [] and idle["seq"] == delta["seq"] and idle["bundle"]["gpu"]  # the head, still current
    for args in (
        {"since": delta["seq"], "epoch": "another"},
        {"since": delta["seq"]},
        {"since": 10**9, "epoch": idle["epoch"]},
    ):
        assert "since" not in client.request(c, "status", **args)  # whole
    control.down(c)
    control.up(c)
    again = client.request(c, "status", since=delta["seq"], epoch=delta["epoch"])
    assert "since" not in again and again["epoch"] != delta["epoch"] and len(again["runs"]) == 2
