"""Process tracking through cgroups (issue 11, What to build 5), with real processes and the host's
real cgroup file system: a setsid'd, double-forked grandchild that ignores SIGTERM is stopped
after its supervisor is SIGKILLed, and the run's cgroup removed. Skipped, with the reason, where
this host (a CI container, a non-root user) cannot create and join cgroups."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from runner.campaign.model import load_campaign
from runner.daemon import client, control
from runner.supervision import cgroups
from tests.helpers_faults import campaign_toml, script
from tests.helpers_runner import iso, run_of, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

KINDS = ["cgroup-v2", "cgroup-v1", "cgroup-v1-pids"]

# a training script whose worker leaves the session and double-forks: the grandchild is in no
# process group, session or parent chain of the run, and shrugs off SIGTERM
DOUBLE_FORK = """
import os, signal, sys, time
run_dir = os.environ.get("CAMPAIGN_RUN_DIR", sys.argv[1] if len(sys.argv) > 1 else ".")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(os.path.join(run_dir, "grandchild.pid"), "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(0.1)
    os._exit(0)
os.wait()
step = 0
while True:
    print(f"iter {step}", flush=True)
    step += 1
    time.sleep(0.05)
"""


def tracking_or_skip(root: Path, kind: str = "auto") -> cgroups.Tracking:
    t = cgroups.detect(root, {cgroups.ENV: kind})
    if not t.active:
        pytest.skip(f"no usable cgroups of the kind {kind} on this host: {t.reason}")
    return t


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


@pytest.mark.parametrize("kind", KINDS)
def test_stop_group_stops_a_double_forked_setsid_grandchild_that_ignores_sigterm(tmp_path, kind):
    t = tracking_or_skip(tmp_path, kind)
    try:
        group = t.prepare("r1", 1)
        assert group is not None and group.is_dir()
        (tmp_path / "s.py").write_text(DOUBLE_FORK)
        # the training process is born in the cgroup, as under a supervisor that joined it first
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os; open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid())); "
                f"os.execv({sys.executable!r}, [{sys.executable!r}, {str(tmp_path / 's.py')!r}, {str(tmp_path)!r}])",
            ],
            stdout=subprocess.DEVNULL,
        )
        pid = int(
            wait_for(lambda: (tmp_path / "grandchild.pid").exists() and (tmp_path / "grandchild.pid").read_text())
        )
        assert pid in cgroups.members(group)
        assert os.getsid(pid) != os.getsid(proc.pid)  # it left the run's session
        t0 = time.monotonic()
        res = cgroups.stop_group(group, 0.3)
        took = time.monotonic() - t0
        proc.wait(5)
        assert res.survivors == [] and res.removed, res
        assert _gone(pid)
        assert not group.exists()
        assert res.kill_at is not None and res.killed >= 1  # SIGTERM was not enough for it
        assert took < 3.0, took
    finally:
        for p in t.leftovers(()):
            cgroups.stop_group(p, 0.0)
        t.remove_root()
    assert not t.root.exists()  # type: ignore[union-attr]


def test_detection_says_why_cgroups_are_not_used(tmp_path):
    t = cgroups.detect(tmp_path, {cgroups.ENV: "subreaper"})
    assert not t.active and "the gap" in t.describe() and "subreaper" in t.describe()
    nothing = tmp_path / "no-cgroupfs"
    nothing.mkdir()
    t = cgroups.detect(tmp_path, {}, cgroup_root=nothing)
    assert not t.active and "no freezer hierarchy" in t.describe(), t.describe()


def test_a_read_only_cgroup_file_system_falls_back_with_the_reason(tmp_path):
    """Most containers mount the cgroup file system read-only: the subreaper stays, and status
    says why."""
    ro = tmp_path / "cg"
    (ro / "freezer").mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "cgroup", "-o", "ro,freezer", "cgroup", str(ro / "freezer")], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a read-only cgroup file system here: {mounted.stderr.strip()}")
    try:
        t = cgroups.detect(tmp_path, {}, cgroup_root=ro)
    finally:
        subprocess.run(["umount", str(ro / "freezer")], capture_output=True)
    assert not t.active
    assert "read-only" in t.describe() and "the gap" in t.describe(), t.describe()


def test_a_user_who_is_not_root_falls_back_with_the_reason(tmp_path):
    """Detection run as `nobody` (setpriv): no cgroup can be created without root or a delegated
    subtree, and each hierarchy tried says so."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the detection as another user")
    root = Path(__file__).resolve().parent.parent
    code = (
        f"import sys; sys.path.insert(0, {str(root)!r}); from pathlib import Path; "
        "from runner.supervision import cgroups; print(cgroups.detect(Path('/tmp/nobody-camp')).describe())"
    )
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if res.returncode != 0:
        pytest.skip(f"the tool cannot run as nobody here: {res.stderr.strip()[-200:]}")
    assert "the gap" in res.stdout and "cgroups are not used" in res.stdout, res.stdout
    assert "not root" in res.stdout or "no cgroup file system" in res.stdout, res.stdout


# ---------------------------------------------------------------------------------------------
# with a real runner


def _campaign(camp: Path, extra: str = "") -> object:
    argv = script(camp, "train.py", DOUBLE_FORK)
    campaign_toml(camp, [("a", argv, extra)], started_at=iso(time.time() - 3600))
    return load_campaign(camp)


@pytest.mark.parametrize("kind", ["auto", "cgroup-v2"])
def test_a_lost_supervisors_double_forked_grandchild_is_stopped_and_its_cgroup_removed(camp, monkeypatch, kind):
    tracking_or_skip(camp, kind)
    monkeypatch.setenv(cgroups.ENV, kind)
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "1")
    c = _campaign(camp, "metrics_regex = 'iter (?P<step>\\d+)'\n")
    control.up(c)
    st = client.request(c, "status")
    assert st["runner"]["process_tracking"].startswith("cgroup v"), st["runner"]["process_tracking"]
    rid = client.request(c, "start", variant="a")["run"]
    run_dir = camp / "runs" / rid
    pid = int(wait_for(lambda: (run_dir / "grandchild.pid").exists() and (run_dir / "grandchild.pid").read_text()))
    sup = json.loads(
        wait_for(lambda: (run_dir / "supervisor.json").exists() and (run_dir / "supervisor.json").read_text())
    )
    group = Path(sup["cgroup"])
    assert pid in cgroups.members(group)
    os.kill(sup["pid"], signal.SIGKILL)
    t0 = time.monotonic()
    wait_for(lambda: _gone(pid), timeout=10, what="the grandchild stopped")
    took = time.monotonic() - t0
    wait_for(lambda: not group.exists(), timeout=5, what="the run's cgroup removed")
    run = wait_for(lambda: (r := run_of(client.request(c, "status"), "a"))["state"] == "failed" and r, timeout=10)
    assert "supervisor lost" in (run.get("stop_reason") or "")
    print(f"\n{kind}: the grandchild gone {took:.2f} s after the supervisor's SIGKILL (grace 1 s)")
    assert took < 5.0, took  # the 1 s grace, then the kill
    control.down(c)
    wait_for(lambda: not group.parent.exists(), timeout=10, what="the campaign's cgroup removed at down")


def test_a_normal_end_empties_and_removes_the_runs_cgroup(camp, monkeypatch):
    t = tracking_or_skip(camp)
    argv = script(camp, "quick.py", "print('done')\n")
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    wait_for(lambda: run_of(client.request(c, "status"), "a")["state"] == "finished", timeout=30)
    group = t.path_for(rid, 1)
    assert group is not None
    wait_for(lambda: not group.exists(), timeout=5, what="the finished run's cgroup removed")
    sup = json.loads((camp / "runs" / rid / "supervisor.json").read_text())
    assert sup["cgroup"] == str(group)  # it was used


def test_a_crashed_runners_leftover_cgroup_is_emptied_and_removed_at_start(camp, monkeypatch):
    t = tracking_or_skip(camp)
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "0.5")
    c = _campaign(camp)
    try:
        stale = t.prepare("gone-run", 3)
        assert stale is not None
        sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        (stale / "cgroup.procs").write_text(str(sleeper.pid))
    except BaseException:
        for p in t.leftovers(()):
            cgroups.stop_group(p, 0.0)
        t.remove_root()
        raise
    control.up(c)
    wait_for(lambda: sleeper.poll() is not None, timeout=10, what="the leftover's process stopped")
    wait_for(lambda: not stale.exists(), timeout=5, what="the leftover cgroup removed")
    log = (camp / ".campaign" / "runner.log").read_text()
    assert "cgroups a previous runner left" in log and "gone-run.a3" in log, log[-2000:]


def test_a_cgroup_named_in_the_run_folder_is_never_emptied(camp, monkeypatch):
    """supervisor.json lies in the run folder, which the training script can write: a script that
    names another cgroup there (here one holding an innocent process) must not get the runner to
    kill it. The runner empties only the attempt's own cgroup, whose path it computes itself."""
    t = tracking_or_skip(camp)
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "0.5")
    assert t.root is not None
    victim = t.root.parent / f"campaign-test-victim-{os.getpid()}"  # another campaign's, say
    victim.mkdir()
    innocent = subprocess.Popen(["sleep", "600"], start_new_session=True)
    (victim / "cgroup.procs").write_text(str(innocent.pid))
    liar = DOUBLE_FORK.replace(
        "os.wait()\n",
        "os.wait()\nimport json\nsup = os.path.join(run_dir, 'supervisor.json')\n"
        "while not os.path.exists(sup): time.sleep(0.02)\n"
        "time.sleep(0.2)\nd = json.load(open(sup))\nd['cgroup'] = " + repr(str(victim)) + "\n"
        "json.dump(d, open(sup + '.tmp', 'w')); os.replace(sup + '.tmp', sup)\n",
    )
    argv = script(camp, "liar.py", liar)
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    c = load_campaign(camp)
    try:
        control.up(c)
        rid = client.request(c, "start", variant="a")["run"]
        run_dir = camp / "runs" / rid
        pid = int(wait_for(lambda: (run_dir / "grandchild.pid").exists() and (run_dir / "grandchild.pid").read_text()))
        sup = wait_for(
            lambda: (d := json.loads((run_dir / "supervisor.json").read_text())).get("cgroup") == str(victim) and d
        )
        os.kill(sup["pid"], signal.SIGKILL)
        wait_for(lambda: _gone(pid), timeout=10, what="the run's own grandchild stopped")
        time.sleep(1.0)
        assert innocent.poll() is None, "a process in a cgroup the run folder named was killed"
    finally:
        innocent.kill()
        innocent.wait()
        cgroups.stop_group(victim, 0.0)


def test_without_cgroups_a_process_the_run_folder_names_is_stopped_only_if_it_is_the_runs(camp, monkeypatch):
    """Without cgroups the runner reads tree.json and supervisor.json, which the training script
    can write. A script that lists an innocent process there (and its group as the run's) must not
    get it killed: only processes carrying this attempt's environment are stopped."""
    monkeypatch.setenv(cgroups.ENV, "subreaper")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "0.5")
    innocent = subprocess.Popen(["sleep", "600"], start_new_session=True)
    ident = [innocent.pid, psutil.Process(innocent.pid).create_time()]
    lie = f"""
import json
gpid = None
while gpid is None or str(gpid) not in open(os.path.join(run_dir, "tree.json")).read():
    time.sleep(0.05)
    try:
        gpid = int(open(os.path.join(run_dir, "grandchild.pid")).read())
    except (OSError, ValueError):
        pass
for name in ("tree.json", "supervisor.json"):
    path = os.path.join(run_dir, name)
    d = json.load(open(path))
    if name == "tree.json":
        d["processes"].append({ident!r})
    else:
        d["pgid"] = {innocent.pid}
    json.dump(d, open(path + ".x", "w"))
    os.replace(path + ".x", path)
"""
    liar = DOUBLE_FORK.replace("os.wait()\n", "os.wait()\n" + lie)
    argv = script(camp, "liar.py", liar)
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    c = load_campaign(camp)
    try:
        control.up(c)
        rid = client.request(c, "start", variant="a")["run"]
        run_dir = camp / "runs" / rid
        pid = int(wait_for(lambda: (run_dir / "grandchild.pid").exists() and (run_dir / "grandchild.pid").read_text()))
        wait_for(lambda: str(innocent.pid) in (run_dir / "tree.json").read_text(), what="the lie in tree.json")
        sup = wait_for(
            lambda: (d := json.loads((run_dir / "supervisor.json").read_text()))["pgid"] == innocent.pid and d,
            what="the lie in supervisor.json",
        )
        os.kill(sup["pid"], signal.SIGKILL)
        wait_for(lambda: _gone(pid), timeout=15, what="the run's own grandchild stopped")
        time.sleep(1.0)
        assert innocent.poll() is None, "a process the run folder named, not the run's, was killed"
    finally:
        innocent.kill()
        innocent.wait()


def test_a_runner_killed_with_a_live_run_keeps_its_cgroup_and_removes_it_at_the_end(camp, monkeypatch):
    """A runner SIGKILLed while a run goes on: the next runner re-adopts the run, keeps its cgroup
    (the sweep of leftovers spares it) and removes it once the run has ended."""
    t = tracking_or_skip(camp)
    argv = script(
        camp,
        "slow.py",
        "import os, time\nwhile not os.path.exists(os.path.join(os.environ['CAMPAIGN_RUN_DIR'], 'go')):\n"
        "    time.sleep(0.05)\n",
    )
    campaign_toml(camp, [("a", argv, "")], started_at=iso(time.time() - 3600))
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    run_dir = camp / "runs" / rid
    group = t.path_for(rid, 1)
    assert group is not None
    sup = json.loads(
        wait_for(lambda: (run_dir / "supervisor.json").exists() and (run_dir / "supervisor.json").read_text())
    )
    assert sup["child_pid"] in cgroups.members(group)
    runner_pid = json.loads((camp / ".campaign" / "runner.pid").read_text())["pid"]
    os.kill(runner_pid, signal.SIGKILL)
    wait_for(lambda: _gone(runner_pid), what="the runner killed")
    control.up(c)
    wait_for(lambda: "re-adopted" in (camp / ".campaign" / "runner.log").read_text(), what="the run re-adopted")
    assert group.is_dir() and sup["child_pid"] in cgroups.members(group)  # kept, with its run in it
    (run_dir / "go").write_text("")
    wait_for(lambda: run_of(client.request(c, "status"), "a")["state"] == "finished", timeout=30)
    wait_for(lambda: not group.exists(), timeout=5, what="the re-adopted run's cgroup removed at its end")
