"""A campaign folder on a FUSE mount (issue 11, finding 12), for real: a passthrough file system
(tests/fixtures/passthrough_fuse.py) that, like sshfs, answers ENOSYS to creating a Unix socket;
then harsher ones, without shared memory maps or without locks. `campaign up`, `start`, `status`
and `down` are run as a user runs them. Skipped, with the reason, where no FUSE mount can be made
(no /dev/fuse, fusepy, fusermount; a container that refuses the mount)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.passthrough_fuse import mount_passthrough
from tests.helpers_faults import campaign_toml, script
from tests.helpers_runner import iso, kill_processes_under, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TINY = """
import json, os
with open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl"), "a") as f:
    for step in range(3):
        f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\\n")
"""


def campaign(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], capture_output=True, text=True, timeout=timeout, env=os.environ
    )


@pytest.fixture
def fuse_camp(tmp_path, monkeypatch, request):
    """A campaign folder on a FUSE mount of tmp_path/src; `request.param` are the mount's options."""
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "2")
    options = getattr(request, "param", ())
    mount = mount_passthrough(tmp_path / "src", tmp_path / "mnt", tmp_path / "fuse.log", *options)
    if isinstance(mount, str):
        pytest.skip(f"no FUSE mount here: {mount}")
    camp = tmp_path / "mnt" / "camp"
    argv = script(camp, "tiny.py", TINY)
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    try:
        yield camp
    finally:
        campaign("down", str(camp), "--abort-runs", timeout=60)
        kill_processes_under(tmp_path / "mnt")
        mount.unmount()


def test_up_start_status_down_with_the_folder_on_fuse(fuse_camp):
    camp = fuse_camp
    up = campaign("up", str(camp))
    assert up.returncode == 0, up.stderr + (camp / ".campaign" / "runner.log").read_text()
    assert "the runner started" in up.stdout
    log = (camp / ".campaign" / "runner.log").read_text()
    assert "Function not implemented" in log  # the socket could not be made there...
    where = Path((camp / ".campaign" / "runner.sock.where").read_text().strip())
    assert where.is_socket() and not str(where).startswith(str(camp))  # ...and lives elsewhere
    start = campaign("start", str(camp), "a")
    assert start.returncode == 0, start.stderr

    def state() -> dict:
        res = campaign("status", str(camp), "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    snap = wait_for(lambda: (s := state())["runs"] and s["runs"][0]["state"] == "finished" and s, timeout=60)
    assert snap["runs"][0]["step"] == 2
    assert "socket: elsewhere" in snap["runner"]["storage"]
    assert "ledger" not in snap["runner"]["storage"]  # WAL works on this one
    text = campaign("status", str(camp))
    assert "storage: socket: elsewhere" in text.stdout, text.stdout
    down = campaign("down", str(camp))
    assert down.returncode == 0, down.stderr
    assert not where.exists()


@pytest.mark.parametrize("fuse_camp", [("--no-shm",)], indirect=True)
def test_a_file_system_without_shared_memory_maps_keeps_the_ledger_in_a_rollback_journal(fuse_camp):
    """SQLite's WAL maps `ledger.sqlite-shm`; on a file system where that map faults, the process
    dies of SIGBUS with no Python traceback — the runner that died with an empty log. The probe
    dies instead, and the ledger is kept with a rollback journal; status says so."""
    camp = fuse_camp
    up = campaign("up", str(camp))
    assert up.returncode == 0, up.stderr + (camp / ".campaign" / "runner.log").read_text()
    log = (camp / ".campaign" / "runner.log").read_text()
    assert "a rollback journal instead of WAL" in log and "SIGBUS" in log, log
    assert campaign("start", str(camp), "a").returncode == 0
    wait_for(lambda: '"state": "finished"' in campaign("status", str(camp), "--json").stdout, timeout=60)
    snap = json.loads(campaign("status", str(camp), "--json").stdout)
    assert "rollback journal" in snap["runner"]["storage"]
    assert not (camp / ".campaign" / "ledger.sqlite-wal").exists()
    assert campaign("down", str(camp)).returncode == 0


@pytest.mark.parametrize("fuse_camp", [("--no-locks",)], indirect=True)
def test_a_file_system_without_locks_is_refused_by_up_with_the_reason(fuse_camp):
    camp = fuse_camp
    up = campaign("up", str(camp), timeout=60)
    assert up.returncode == 2, (up.returncode, up.stdout, up.stderr)
    assert "the ledger cannot be kept in" in up.stderr and "local file system" in up.stderr, up.stderr
    assert "POSIX locks fail there (ENOLCK" in up.stderr, up.stderr
    log = (camp / ".campaign" / "runner.log").read_text()
    assert "cannot start: the ledger cannot be kept" in log


def test_a_runner_killed_by_a_signal_while_starting_is_reported_by_up(tmp_path, monkeypatch):
    """Whatever kills the runner at start lands in runner.log and in `up`'s answer (exit 2):
    here a SIGBUS, as from a file system's memory map, through the runner's fault point."""
    camp = tmp_path / "camp"
    argv = script(camp, "tiny.py", TINY)
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    monkeypatch.setenv("CAMPAIGN_FAULT_AT", "runner:starting")
    monkeypatch.setenv("CAMPAIGN_FAULT_SIGNAL", str(int(signal.SIGBUS)))
    try:
        up = campaign("up", str(camp), timeout=60)
    finally:
        kill_processes_under(tmp_path)
    assert up.returncode == 2, (up.returncode, up.stdout, up.stderr)
    assert "the runner died while starting" in up.stderr and "Bus error" in up.stderr, up.stderr
    log = (camp / ".campaign" / "runner.log").read_text()
    assert "Fatal Python error: Bus error" in log
