"""Process identity and tree stopping, used by the supervisor and by the runner's re-adoption."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from runner.supervision import proctree
from tests.helpers_supervision import all_gone

SLEEPER = "import time\nwhile True: time.sleep(0.1)"


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                p.kill()
        p.wait(timeout=10)


def test_identity_needs_pid_and_create_time(procs):
    p = subprocess.Popen([sys.executable, "-c", SLEEPER])
    procs.append(p)
    ident = proctree.identity_of(p.pid)
    assert ident.pid == p.pid and ident.create_time > 0
    assert proctree.is_alive(*ident)
    assert not proctree.is_alive(p.pid, ident.create_time - 5.0)  # same pid, another process
    assert proctree.process_of(p.pid, ident.create_time + 5.0) is None
    assert proctree.process_of(*ident).pid == p.pid
    p.kill()
    p.wait()
    assert not proctree.is_alive(*ident)
    assert proctree.identity_of(p.pid) is None or proctree.identity_of(p.pid) != ident
    assert not proctree.is_alive(None, None)


def test_a_zombie_is_not_alive(procs):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    procs.append(p)
    ident = proctree.identity_of(p.pid)
    assert ident is not None  # not reaped before `p.wait()`: the pid stays this process's
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.02)
    assert psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE  # exited, not reaped yet
    assert not proctree.is_alive(*ident)
    p.wait()


def test_stop_tree_terms_then_kills_a_group_and_a_runaway(procs):
    # a leader in its own session, with a child that ignores SIGTERM and moved to its own session
    code = (
        "import os, subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import os, signal, time\\n"
        "os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "print(os.getpid(), flush=True)\\nwhile True: time.sleep(0.1)'], stdout=subprocess.PIPE, text=True)\n"
        "print(c.stdout.readline().strip(), flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    procs.append(leader)
    runaway = int(leader.stdout.readline())
    res = proctree.stop_tree(leader.pid, leader.pid, grace=0.5, reap=lambda: leader.poll())
    assert res.term_at and res.kill_at and res.kill_at - res.term_at >= 0.5
    assert res.killed >= 1 and res.survivors == [] and res.gone_at
    assert all_gone([leader.pid, runaway])


def test_stop_tree_without_stubborn_processes_needs_no_kill(procs):
    p = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True)
    procs.append(p)
    res = proctree.stop_tree(p.pid, p.pid, grace=30.0, reap=lambda: p.poll())
    assert res.kill_at is None and res.gone_at - res.term_at < 30.0


def test_subreaper_can_be_set_in_a_child_process():
    out = subprocess.run(
        [sys.executable, "-c", "from runner.supervision import proctree; print(proctree.set_child_subreaper())"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        timeout=60,
    )
    assert out.stdout.strip() == ("True" if sys.platform.startswith("linux") else "False")
