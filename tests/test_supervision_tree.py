"""Every process of a run is gone after a stop: children, grandchildren, and those that left the
process group or the session (setsid, double fork)."""

import json
import sys

import pytest

from tests.helpers_supervision import METRIC_WRITER, RunFolder, all_gone

PY = sys.executable

# The training process starts a child in its group, a grandchild, and a daemon that calls setsid
# after a double fork (reparented away from the training process); it records their pids.
TREE = (
    METRIC_WRITER
    + """
import json, os, subprocess, sys, time
kids = []
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time\\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time\\\\nwhile True: time.sleep(0.1)'])\\n"
    "print(g.pid, flush=True)\\n"
    "while True: time.sleep(0.1)"], stdout=subprocess.PIPE, text=True)
kids.append(child.pid)
kids.append(int(child.stdout.readline()))
r, w = os.pipe()
if os.fork() == 0:                       # double fork + setsid: a daemon outside the group
    os.setsid()
    if os.fork() == 0:
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)     # and it ignores SIGTERM too
        os.write(w, str(os.getpid()).encode())
        while True:
            time.sleep(0.1)
    os._exit(0)
os.wait()
kids.append(int(os.read(r, 32)))
with open("tree.json", "w") as f:
    json.dump(kids + [os.getpid()], f)
MODE
"""
)

STOP_BY_RULE = """
emit(step=1, loss=float("nan"))
while True:
    time.sleep(0.1)
"""
END_NORMALLY = """
emit(step=1, loss=1.0)
"""


@pytest.fixture
def run(tmp_path):
    r = RunFolder(tmp_path / "camp")
    yield r
    r.cleanup()
    pids = json.loads((r.campaign / "tree.json").read_text()) if (r.campaign / "tree.json").exists() else []
    for pid in pids:  # never leave a stray process behind, even on failure
        try:
            import os
            import signal

            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("mode", ["rule", "normal_end"])
def test_no_process_left_behind(run, mode):
    run.script("tree.py", TREE.replace("MODE", STOP_BY_RULE if mode == "rule" else END_NORMALLY))
    run.write([PY, "tree.py"], [{"kind": "nonfinite"}], grace=1.0)
    assert run.run(timeout=90) == 0
    pids = json.loads((run.campaign / "tree.json").read_text())
    assert len(pids) == 4
    assert all_gone(pids, timeout=5), run.log()
    ex = run.json("exit.json")
    if mode == "rule":
        assert ex["killed_by"] == "rule" and ex["kill_at"] is not None  # the daemon ignored TERM
    else:
        assert ex["returncode"] == 0 and ex["killed_by"] is None
        assert "outlived it" in run.log()
