"""Fault injection with a real runner (issue 11, pytest marker `faults`): a full disk (a small
tmpfs filled for real), kill -9 of the runner and of a supervisor at each write point of the end
of a run, a 200-character campaign path, windows that have not opened or have closed, hostile
metric lines, concurrent `up`. Each test checks that nothing recorded is lost; the suite's figures
are printed at the end of the run (README, "Reliability")."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from runner.campaign.faultpoints import FAULT_ENV, POINTS
from runner.campaign.model import load_campaign
from runner.campaign.statedir import MAX_SOCKET_PATH_BYTES, paths_for
from runner.cli import main as cli_main
from runner.daemon import client, control
from runner.ledger import store as L
from tests.helpers_faults import (
    FIGURES,
    NOTES,
    campaign_toml,
    can_mount,
    check_recorded,
    fill,
    metric_lines,
    mount_tmpfs,
    script,
    unmount,
)
from tests.helpers_runner import iso, kill_processes_under, run_of, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

STEPS = """
import json, os, sys, time
n, delay = int(sys.argv[1]), float(sys.argv[2])
with open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl"), "a") as f:
    for step in range(n):
        f.write(json.dumps({"t": time.time(), "step": step, "loss": 1.0 / (step + 1)}) + "\\n")
        f.flush()
        time.sleep(delay)
"""


def status(c) -> dict:
    return client.request(c, "status")


def ledger_ro(c):
    return L.connect(paths_for(c).ledger, readonly=True)


def now_iso(offset_s: float = -3600) -> str:
    return iso(time.time() + offset_s)


# ---------------------------------------------------------------------------------------------
# #1: a brief full disk


@pytest.fixture
def disk_camp(camp, monkeypatch):
    why = can_mount()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    mount_tmpfs(camp, "24m")
    try:
        yield camp
    finally:
        try:
            if (camp / "campaign.toml").exists():
                control.down(load_campaign(camp), abort_runs=True, timeout=30)
        except Exception:
            pass
        kill_processes_under(camp)
        unmount(camp)


def test_a_full_disk_does_not_stop_the_runner(disk_camp):
    """Before: the runner's log() hit ENOSPC inside the loop's `except`, the loop task died, a
    finished run showed `running` forever and the queue never moved, even after space returned."""
    camp = disk_camp
    sleeper = script(camp, "sleep.py", "import time, sys\ntime.sleep(float(sys.argv[1]))\n")
    campaign_toml(camp, [("a", [*sleeper, "4"], ""), ("b", [*sleeper, "0.5"], "")], started_at=now_iso())
    c = load_campaign(camp)
    control.up(c)
    client.request(c, "start", variant="a")
    client.request(c, "start", variant="b")  # one slot: b waits for a
    wait_for(lambda: run_of(status(c), "a")["state"] == "running", timeout=60, what="a running")
    filler = fill(camp)
    FIGURES["faults injected"] += 1
    time.sleep(6)  # a ends while the disk is full: its end, the logs, b's launch all fail
    assert client.ping(c) is not None  # the socket answers throughout
    filler.unlink()  # space returns
    freed = time.monotonic()
    wait_for(lambda: run_of(status(c), "b")["state"] != "queued", timeout=30, what="b launched once space returned")
    delay = time.monotonic() - freed
    NOTES.append(f"full disk freed: the queued run launched {delay:.2f} s later")
    snap = wait_for(
        lambda: (s := status(c)) and all(run_of(s, v)["state"] not in ("queued", "running") for v in "ab") and s,
        timeout=60,
        what="both runs ended",
    )
    assert run_of(snap, "b")["state"] == "finished"
    assert run_of(snap, "a")["state"] in ("finished", "failed")  # its supervisor may not have written exit.json
    with ledger_ro(c) as conn:
        for v in "ab":
            assert check_recorded(conn, run_of(snap, v)["id"]) == 0
    assert delay < 5.0


# ---------------------------------------------------------------------------------------------
# #8: a long campaign path


def test_a_200_character_campaign_path_gets_its_socket_where_a_socket_can_live(camp):
    """Before: a folder path of 86 characters or more could not start its runner (AF_UNIX's
    107-byte limit)."""
    deep = camp
    while len(str(deep)) < 200:
        deep = deep / ("d" * 40)
    root = Path(str(deep)[:200].rstrip("/"))
    assert len(str(root)) == 200
    steps = script(root, "steps.py", STEPS)
    campaign_toml(root, [("a", [*steps, "8", "0.02"], "")], started_at=now_iso())
    c = load_campaign(root)
    FIGURES["faults injected"] += 1
    try:
        up = control.up(c)
        assert up.started
        paths = paths_for(c)
        sock = paths.socket
        assert sock != paths.default_socket and len(os.fsencode(sock)) <= MAX_SOCKET_PATH_BYTES
        assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700 and sock.parent.stat().st_uid == os.getuid()
        assert paths.socket_pointer.read_text().strip() == str(sock)
        assert cli_main(["start", str(root), "a"]) == 0
        run = wait_for(lambda: (r := run_of(status(c), "a")) and r["state"] == "finished" and r, what="a finished")
        assert cli_main(["status", str(root)]) == 0
        with ledger_ro(c) as conn:
            assert check_recorded(conn, run["id"], expect_lines=8) == 0
        assert "stopped" in control.down(c).message
        assert not sock.exists() and not paths.socket_pointer.exists()
    finally:
        try:
            control.down(c, abort_runs=True, timeout=30)
        except Exception:
            pass
        kill_processes_under(root)


# ---------------------------------------------------------------------------------------------
# #9: kill -9 at each write point of the end of a run


@pytest.mark.parametrize("point", POINTS)
def test_kill_9_at_each_write_point_of_the_end_of_a_run(camp, monkeypatch, point):
    """A real SIGKILL of the runner or the supervisor at each write point: the run's end, its
    verdict and its events are recorded once, every metric line counted (before: 2 kills in 10
    left a finished run without its `finished` event, and the rebuild never added it)."""
    steps = script(camp, "steps.py", STEPS)
    nan = script(camp, "nan.py", STEPS.replace("1.0 / (step + 1)", "float('nan') if step == 5 else 1.0"))
    verdict_point = point == "supervisor:after_verdict_json"
    argv = [*nan, "40", "0.02"] if verdict_point else [*steps, "12", "0.02"]
    campaign_toml(camp, [("a", argv, "")], started_at=now_iso())
    c = load_campaign(camp)
    monkeypatch.setenv(FAULT_ENV, point)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    FIGURES["faults injected"] += 1
    run_dir = camp / "runs" / rid
    if point.startswith("runner:"):
        info = json.loads(paths_for(c).pid.read_text())
        wait_for(lambda: not control.is_our_runner(info, paths_for(c)), timeout=60, what="the runner killed")
        monkeypatch.delenv(FAULT_ENV)
        control.up(c)  # the rebuild takes it from there
    expected = {
        "supervisor:after_verdict_json": "stopped",
        "supervisor:before_exit_json": "failed",  # supervisor lost: nothing says how it ended
    }.get(point, "finished")
    run = wait_for(
        lambda: (r := run_of(status(c), "a")) and r["state"] not in ("queued", "running") and r,
        timeout=90,
        what=f"the run ended after a kill at {point}",
    )
    assert run["state"] == expected, run
    sup = json.loads((run_dir / "supervisor.json").read_text())
    wait_for(lambda: not psutil.pid_exists(sup["child_pid"]) or _zombie(sup["child_pid"]), timeout=60, what="no orphan")
    try:  # an orphan's last lines, written while it was being stopped, are read after the end
        wait_for(lambda: run_of(status(c), "a")["lines"] >= metric_lines(run_dir), timeout=10, what="the last lines")
    except AssertionError:
        pass  # counted as lost below
    with ledger_ro(c) as conn:
        assert check_recorded(conn, rid, expect_lines=metric_lines(run_dir)) == 0
        kinds = [e["kind"] for e in L.events(conn, run_id=rid, limit=500)]
    assert kinds.count(expected) == 1, kinds
    if verdict_point:
        assert kinds.count("verdict") == 1


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def test_the_rebuild_repairs_a_run_whose_history_lacks_its_end(camp):
    """A ledger written before the end and its event were one transaction, killed between them."""
    steps = script(camp, "steps.py", STEPS)
    campaign_toml(camp, [("a", [*steps, "3", "0.01"], "")], started_at=now_iso())
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    wait_for(lambda: run_of(status(c), "a")["state"] == "finished", what="a finished")
    control.down(c)
    conn = L.connect(paths_for(c).ledger)
    conn.execute("DELETE FROM events WHERE run_id=? AND kind='finished'", (rid,))
    conn.close()
    FIGURES["faults injected"] += 1
    control.up(c)
    with ledger_ro(c) as conn:
        ends = [e for e in L.events(conn, run_id=rid, limit=100) if e["kind"] == "finished"]
        assert len(ends) == 1 and ends[0]["repaired"] is True
        assert check_recorded(conn, rid, expect_lines=3) == 0


# ---------------------------------------------------------------------------------------------
# #11: windows


def test_a_window_that_opens_in_the_future_waits_and_an_expired_one_refuses(camp, capsys):
    steps = script(camp, "steps.py", STEPS)
    campaign_toml(camp, [("a", [*steps, "3", "0.01"], "")], started_at=now_iso(+2 * 3600))
    c = load_campaign(camp)
    FIGURES["faults injected"] += 2
    control.up(c)
    assert cli_main(["start", str(camp), "a"]) == 0
    out = capsys.readouterr().out
    assert "queued" in out and "waiting: the rental window opens at" in out
    time.sleep(1.0)  # several ticks: nothing launches before the window
    snap = status(c)
    assert run_of(snap, "a")["state"] == "queued"
    b = snap["bundle"]
    assert b["warning"] == "not_open" and b["remaining_seconds"] <= 3 * 24 * 3600
    assert cli_main(["status", str(camp)]) == 0
    assert "opens at" in capsys.readouterr().out
    control.down(c, abort_runs=True)

    campaign_toml(camp, [("b", [*steps, "3", "0.01"], "")], started_at=now_iso(-3 * 24 * 3600 - 600))
    c = load_campaign(camp)
    control.up(c)
    assert cli_main(["start", str(camp), "b"]) == 1
    assert "refused" in capsys.readouterr().err
    rid = run_of(status(c), "b")["id"]
    assert cli_main(["resume", str(camp), rid]) == 2  # a refused resume is the user's to fix: exit 2
    with ledger_ro(c) as conn:
        assert check_recorded(conn, rid) == 0


# ---------------------------------------------------------------------------------------------
# #2, #3, #4, #14: hostile metric lines, confined to their run


def test_hostile_metric_lines_end_only_their_own_run_by_its_own_rule(camp):
    huge = script(
        camp,
        "huge.py",
        """
        import os, time
        p = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
        with open(p, "a") as f:
            for step in range(6):
                f.write('{"step": %d, "loss": 1.5}\\n' % step)
            f.write('{"step": 6, "loss": 1%s}\\n' % ("0" * 400))
            f.flush()
            time.sleep(30)
        """,
    )
    odd = script(
        camp,
        "odd.py",
        """
        import os
        p = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
        big = "9" * 400
        with open(p, "a") as f:
            f.write('{"step": 1, "loss": 2.0, "samples": 10}\\n')
            f.write('{"step": %s, "samples": %s, "truncated": %s, "loss": 1.0}\\n' % (big, big, big))
            f.write("[" * 100000 + "]" * 100000 + "\\n")
            f.write('{"event": "checkpoint", "path": "%s", "step": [1]}\\n' % ("/" * 300))
            f.write('{"step": 3, "loss": 0.5, "samples": 10}\\n')
        """,
    )
    campaign_toml(camp, [("a", huge, ""), ("b", odd, "")], started_at=now_iso())
    c = load_campaign(camp)
    control.up(c)
    ra = client.request(c, "start", variant="a")["run"]
    rb = client.request(c, "start", variant="b")["run"]
    FIGURES["faults injected"] += 4
    snap = wait_for(
        lambda: (s := status(c)) and all(run_of(s, v)["state"] not in ("queued", "running") for v in "ab") and s,
        timeout=90,
        what="both runs ended",
    )
    a, b = run_of(snap, "a"), run_of(snap, "b")
    assert a["state"] == "stopped" and a["stop_rule"] == "nonfinite", a  # before: "supervisor lost"
    assert b["state"] == "finished" and b["step"] == 3 and b["lines"] == 3 and b["bad_lines"] == 1, b
    with ledger_ro(c) as conn:
        assert check_recorded(conn, ra) == 0 and check_recorded(conn, rb, expect_lines=3) == 0
    assert client.ping(c) is not None
    assert cli_main(["verify", str(camp)]) in (0, 1)  # no traceback out of a 100,000-deep line


# ---------------------------------------------------------------------------------------------
# #5 at launch: a frozen run whose env the OS refuses fails alone; #14 concurrent up


def test_an_env_the_os_refuses_fails_that_run_and_the_queue_goes_on(tmp_path, monkeypatch):
    """A run frozen before `check` refused such keys: Popen raised at every tick and no other run
    ever launched. Now that run fails with the reason and the next one launches."""
    import dataclasses

    from runner.daemon.launcher import RunManager
    from runner.daemon.slots import plan_slots

    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    root = tmp_path / "camp"
    steps = script(root, "steps.py", STEPS)
    campaign_toml(root, [("a", [*steps, "2", "0.01"], ""), ("b", [*steps, "2", "0.01"], "")], started_at=now_iso())
    c = load_campaign(root)
    bad = dataclasses.replace(c.variant("a"), env=(("A=B", "x"),))
    c = dataclasses.replace(c, variants=(bad, c.variant("b")))
    ledger = L.Ledger(paths_for(c).ledger)
    m = RunManager(c, ledger, plan_slots(c, gpu_count=0, nvml_error=None), grace_seconds=2)
    ra, rb = m.enqueue("a")["run"], m.enqueue("b")["run"]
    FIGURES["faults injected"] += 1
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ledger.run(rb).state in ("queued", "running"):
            m.tick()
            time.sleep(0.1)
        reason = ledger.run(ra).stop_reason
        assert ledger.run(ra).state == "failed" and "environment variable" in reason, reason
        assert ledger.run(rb).state == "finished"
        assert check_recorded(ledger.conn, ra) == 0 and check_recorded(ledger.conn, rb, expect_lines=2) == 0
    finally:
        kill_processes_under(tmp_path)
        ledger.close()


def test_concurrent_up_says_started_once(camp):
    steps = script(camp, "steps.py", STEPS)
    campaign_toml(camp, [("a", [*steps, "2", "0.01"], "")], started_at=now_iso())
    env = dict(os.environ)

    def up() -> str:
        res = subprocess.run(
            [sys.executable, "-m", "runner", "up", str(camp)], capture_output=True, text=True, env=env, timeout=90
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda _: up(), range(6)))
    assert sum("the runner started" in o for o in outs) == 1, outs
    assert sum("already running" in o for o in outs) == 5, outs
    pids = {json.loads(paths_for(load_campaign(camp)).pid.read_text())["pid"]}
    assert len(pids) == 1
    os.kill(next(iter(pids)), signal.SIGTERM)


# ---------------------------------------------------------------------------------------------
# #10: a lost supervisor's setsid'd grandchildren, with metrics_regex


def test_a_lost_supervisors_setsid_grandchild_is_stopped_even_after_its_parent_died_of_the_pipe(camp, monkeypatch):
    """With metrics_regex the training process writes into the supervisor's pipe: once the
    supervisor is SIGKILLed it dies of the broken pipe, and its setsid'd grandchild (a data
    worker in a session of its own) used to survive, unjudged. Now the runner stops every process
    of the supervisor's last process list still alive. This is the tracking of hosts without
    usable cgroups (tests/test_cgroup_tracking.py covers the cgroup one)."""
    monkeypatch.setenv("CAMPAIGN_PROCESS_TRACKING", "subreaper")
    spawner = script(
        camp,
        "spawner.py",
        """
        import os, subprocess, sys, time
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "grandchild.pid"), "w").write(str(kid.pid))
        step = 0
        while True:
            print(f"iter {step}: loss 1.0", flush=True)
            step += 1
            time.sleep(0.05)
        """,
    )
    campaign_toml(
        camp, [("a", spawner, "metrics_regex = 'iter (?P<step>\\d+): loss (?P<loss>\\S+)'\n")], started_at=now_iso()
    )
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    run_dir = camp / "runs" / rid
    pid = int(
        wait_for(
            lambda: (run_dir / "grandchild.pid").exists() and (run_dir / "grandchild.pid").read_text(),
            what="the grandchild",
        )
    )
    grandchild = psutil.Process(pid)
    wait_for(
        lambda: any(
            p[0] == pid
            for p in (json.loads((run_dir / "tree.json").read_text()) if (run_dir / "tree.json").exists() else {}).get(
                "processes", []
            )
        ),
        what="the grandchild in tree.json",
    )
    sup = json.loads((run_dir / "supervisor.json").read_text())
    os.kill(sup["pid"], signal.SIGKILL)
    FIGURES["faults injected"] += 1
    wait_for(lambda: run_of(status(c), "a")["state"] == "failed", timeout=60, what="the lost supervisor noticed")
    wait_for(lambda: not grandchild.is_running() or _zombie(pid), timeout=30, what="the grandchild stopped")
    assert "cgroups are not used" in status(c)["runner"]["process_tracking"]  # the gap, said
    assert "double-forks after the supervisor is lost escapes" in status(c)["runner"]["process_tracking"]
    with ledger_ro(c) as conn:
        assert check_recorded(conn, rid) == 0


# ---------------------------------------------------------------------------------------------
# ENOSPC on the training side: checkpoint and metric writes

FULL_DISK_TRAINING = r"""
import json, os, sys
from pathlib import Path
import torch
from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer, latest_checkpoint

disk = Path(sys.argv[1])
model = torch.nn.Linear(64, 64)
ck = Checkpointer(model, torch.optim.Adam(model.parameters()), directory=disk / "ck", keep=3,
                  install_signals=False, background=False)
ck.save(1)
ck.wait()
metrics.report(step=1, loss=1.0)
metrics.flush()
filler = open(disk / "filler", "wb", buffering=0)
for size in (1 << 20, 1 << 12, 1):
    while True:
        try:
            filler.write(b"\0" * size)
        except OSError:
            break
out = {}
try:
    ck.save(2)
    ck.wait()
    out["save_on_full_disk"] = "ok?"
except Exception as exc:
    out["save_on_full_disk"] = type(exc).__name__
for step in range(2, 50):
    metrics.report(step=step, loss=1.0)  # must not raise: "disk full: say so once, keep training"
metrics.flush()
out["temp_files_left"] = sorted(p.name for p in (disk / "ck").iterdir() if "tmp" in p.name)
out["latest_after_failure"] = latest_checkpoint(disk / "ck").name
torch.load(latest_checkpoint(disk / "ck"), weights_only=True)  # the resume point still loads
filler.close()
os.unlink(disk / "filler")
ck.save(3)
ck.wait()
out["latest_after_space_returned"] = latest_checkpoint(disk / "ck").name
print(json.dumps(out))
"""


def test_a_full_disk_fails_a_checkpoint_cleanly_and_training_goes_on(tmp_path):
    why = can_mount()
    if why:
        pytest.skip(why)
    from runner.import_paths import tool_env

    disk = tmp_path / "disk"
    mount_tmpfs(disk, "8m")
    FIGURES["faults injected"] += 2
    try:
        (tmp_path / "t.py").write_text(FULL_DISK_TRAINING)
        env = tool_env(dict(os.environ, CAMPAIGN_RUN_DIR=str(disk)))
        res = subprocess.run(
            [sys.executable, str(tmp_path / "t.py"), str(disk)], env=env, capture_output=True, text=True, timeout=180
        )
        assert res.returncode == 0, res.stderr[-2000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        unmount(disk)
    assert out["save_on_full_disk"] == "RuntimeError"  # said at wait(), the loop decides
    assert out["temp_files_left"] == []  # no torn file where a checkpoint would be read
    assert out["latest_after_failure"] == "ckpt-000000001.pt"
    assert out["latest_after_space_returned"] == "ckpt-000000003.pt"
    FIGURES["runs checked"] += 1


def test_a_failure_inside_a_tick_is_confined_to_its_run_and_recorded_on_it(tmp_path, monkeypatch):
    """Containment, enforced: one run's folder that cannot be read (its metrics file replaced by a
    folder) is recorded on that run (`tick_error`) and ends from its exit.json; the other run, in
    the same ticks, is untouched."""
    from runner.daemon.launcher import RunManager
    from runner.daemon.slots import plan_slots

    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    root = tmp_path / "camp"
    steps = script(root, "steps.py", STEPS)
    breaker = script(
        root,
        "breaker.py",
        """
        import os, time
        d = os.environ["CAMPAIGN_RUN_DIR"]
        time.sleep(0.5)
        os.makedirs(os.path.join(d, "metrics.jsonl"))  # where the runner reads lines, a folder
        time.sleep(1.0)
        """,
    )
    campaign_toml(root, [("a", breaker, ""), ("b", [*steps, "20", "0.05"], "")], started_at=now_iso())
    c = load_campaign(root)
    ledger = L.Ledger(paths_for(c).ledger)
    m = RunManager(c, ledger, plan_slots(c, gpu_count=0, nvml_error=None), grace_seconds=2)
    ra, rb = m.enqueue("a")["run"], m.enqueue("b")["run"]
    FIGURES["faults injected"] += 1
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(ledger.run(r).state in ("queued", "running") for r in (ra, rb)):
            m.tick()  # never raises
            time.sleep(0.1)
        errors = [e for e in L.events(ledger.conn, run_id=ra, limit=100) if e["kind"] == "tick_error"]
        assert errors and "IsADirectoryError" in errors[0]["error"], errors
        assert ledger.run(ra).state == "finished", ledger.run(ra).stop_reason
        assert ledger.run(rb).state == "finished"
        assert not [e for e in L.events(ledger.conn, run_id=rb, limit=100) if e["kind"] == "tick_error"]
        assert check_recorded(ledger.conn, ra) == 0 and check_recorded(ledger.conn, rb, expect_lines=20) == 0
    finally:
        kill_processes_under(tmp_path)
        ledger.close()
