"""The supervisor stops runs by rule, with real processes and signals."""

import math
import os
import signal
import sys

import pytest

from tests.helpers_supervision import METRIC_WRITER, RunFolder, all_gone

PY = sys.executable


@pytest.fixture
def run(tmp_path):
    r = RunFolder(tmp_path / "camp")
    yield r
    r.cleanup()


def test_nonfinite_loss_stops_the_run_with_rule_and_value(run):
    run.script(
        "train.py",
        METRIC_WRITER
        + """
import time
for i in range(200):
    emit(step=i, loss=float("nan") if i == 5 else 1.0 / (i + 1))
    time.sleep(0.02)
""",
    )
    run.write([PY, "train.py"], [{"kind": "nonfinite", "metric": "loss"}])
    assert run.run() == 0
    verdict = run.json("verdict.json")
    assert verdict["kind"] == "nonfinite" and verdict["metric"] == "loss" and verdict["step"] == 5
    assert math.isnan(verdict["value"]) and verdict["attempt"] == 1
    assert verdict["rule"] == {"kind": "nonfinite", "metric": "loss"}
    ex = run.json("exit.json")
    assert ex["killed_by"] == "rule" and ex["signal"] == signal.SIGTERM and ex["returncode"] is None
    assert ex["term_at"] >= verdict["at"] and ex["attempt"] == 1
    sup = run.json("supervisor.json")
    assert sup["pgid"] == sup["child_pid"] == ex["pid"]
    assert "stopped by rule nonfinite" in run.log()


def test_run_ignoring_sigterm_is_killed_after_the_grace(run):
    run.script(
        "stubborn.py",
        METRIC_WRITER
        + """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
emit(step=1, loss=float("inf"))
while True:
    time.sleep(0.1)
""",
    )
    run.write([PY, "stubborn.py"], [{"kind": "nonfinite"}], grace=1.0)
    assert run.run() == 0
    ex = run.json("exit.json")
    assert ex["signal"] == signal.SIGKILL and ex["killed_by"] == "rule"
    assert ex["kill_at"] - ex["term_at"] >= 1.0
    assert run.json("verdict.json")["value"] == math.inf


def test_a_finished_run_records_its_exit_code(run):
    run.script(
        "ok.py",
        METRIC_WRITER
        + """
for i in range(5):
    emit(step=i, loss=1.0)
raise SystemExit(3)
""",
    )
    run.write([PY, "ok.py"], [{"kind": "nonfinite"}])
    run.run()
    ex = run.json("exit.json")
    assert ex["returncode"] == 3 and ex["signal"] is None and ex["killed_by"] is None
    assert ex["metric_lines"] == 5
    assert not (run.dir / "verdict.json").exists()


def test_stalled_run_is_stopped(run):
    run.script(
        "stall.py",
        METRIC_WRITER
        + """
import time
emit(step=1, loss=2.0)
time.sleep(120)
""",
    )
    run.write([PY, "stall.py"], [{"kind": "stalled", "within": "2s"}])
    assert run.run() == 0
    v = run.json("verdict.json")
    assert v["kind"] == "stalled" and v["value"] > 2.0 and v["step"] == 1
    assert run.json("exit.json")["killed_by"] == "rule"


def test_no_resume_point_run_is_stopped(run):
    run.script(
        "nockpt.py",
        METRIC_WRITER
        + """
import time
for i in range(600):
    emit(step=i, loss=1.0)
    time.sleep(0.05)
""",
    )
    run.write([PY, "nockpt.py"], [{"kind": "no_resume_point", "within": "2s"}])
    assert run.run() == 0
    v = run.json("verdict.json")
    assert v["kind"] == "no_resume_point" and v["value"] > 2.0
    assert run.json("exit.json")["killed_by"] == "rule"


def test_below_threshold_after_step(run):
    run.script(
        "weak.py",
        METRIC_WRITER
        + """
import time
for i in range(0, 5000, 100):
    emit(step=i, dev_acc=0.3)
    time.sleep(0.01)
time.sleep(60)
""",
    )
    run.write([PY, "weak.py"], [{"kind": "below", "metric": "dev_acc", "threshold": 0.55, "after_step": 2000}])
    run.run()
    v = run.json("verdict.json")
    assert v["kind"] == "below" and v["step"] == 2000 and v["value"] == 0.3


def test_unmodified_script_followed_through_metrics_regex(run):
    run.script(
        "legacy.py",
        """
import sys, time
print("loading the corpus...")
for i in range(100, 100000, 10):
    loss = "nan" if i == 150 else f"{2.31 - i / 1e4:.2f}"
    print(f"iter {i}: loss {loss}")
    time.sleep(0.01)
""",
    )
    run.write(
        [PY, "legacy.py"],
        [{"kind": "nonfinite", "metric": "loss"}],
        variant_extra={"metrics_regex": r"iter (?P<step>\d+): loss (?P<loss>\S+)"},
    )
    assert run.run() == 0
    v = run.json("verdict.json")
    assert v["kind"] == "nonfinite" and v["step"] == 150 and math.isnan(v["value"])
    log = run.log()
    assert "loading the corpus..." in log and "iter 120: loss 2.30" in log and "iter 150: loss nan" in log
    assert run.json("exit.json")["killed_by"] == "rule"


@pytest.mark.parametrize("abort", [True, False])
def test_sigterm_to_the_supervisor_stops_the_run(run, abort):
    run.script(
        "long.py",
        METRIC_WRITER
        + """
import time
for i in range(100000):
    emit(step=i, loss=1.0)
    time.sleep(0.05)
""",
    )
    run.write([PY, "long.py"], [{"kind": "nonfinite"}])
    run.start()
    run.wait_for(
        lambda: (run.dir / "supervisor.json").exists() and (run.dir / "metrics.jsonl").exists(), what="the run to start"
    )
    child = run.json("supervisor.json")["child_pid"]
    if abort:
        (run.dir / "abort.json").write_text('{"reason": "wrong corpus", "at": 0, "by": "test"}')
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.wait() == 0
    ex = run.json("exit.json")
    assert ex["killed_by"] == ("abort" if abort else "down")
    assert not (run.dir / "verdict.json").exists()
    assert all_gone([child])


def test_sigusr1_is_forwarded_to_the_training_process(run):
    run.script(
        "usr1.py",
        METRIC_WRITER
        + """
import os, signal, time
def on_usr1(s, f):
    open("usr1.seen", "w").write("yes")
signal.signal(signal.SIGUSR1, on_usr1)
emit(step=0, loss=1.0)
for _ in range(1200):
    time.sleep(0.05)
    if os.path.exists("usr1.seen"):
        break
""",
    )
    run.write([PY, "usr1.py"], [])
    run.start()
    # the first line is written after the handler is installed
    run.wait_for(
        lambda: (run.dir / "metrics.jsonl").exists() and (run.dir / "metrics.jsonl").stat().st_size > 0,
        what="the run to install its handler",
    )
    os.kill(run.proc.pid, signal.SIGUSR1)
    assert run.wait() == 0
    assert (run.campaign / "usr1.seen").read_text() == "yes"
    assert run.json("exit.json")["returncode"] == 0


def test_the_checkpoint_saved_on_an_aborts_sigterm_is_graded_before_the_end(run):
    """An abort's SIGTERM makes the helpers save a checkpoint: it is graded before exit.json is
    written, so the run's end never shows it unverified (only a second SIGTERM gives up waiting)."""
    run.script(
        "helper.py",
        """
import time, torch
from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = Checkpointer(model, opt, every_s=1e9)
step = 0
while True:
    step += 1
    metrics.report(step, loss=1.0)
    ckpt.maybe_save(step)
    if ckpt.should_stop:
        ckpt.exit()
    time.sleep(0.02)
""",
    )
    run.write([PY, "helper.py"], [{"kind": "nonfinite"}], grace=20.0)
    run.start()
    metrics = run.dir / "metrics.jsonl"
    run.wait_for(lambda: metrics.exists() and metrics.read_bytes().count(b"\n") >= 5, what="steps", timeout=60)
    (run.dir / "abort.json").write_text('{"reason": "wrong corpus", "at": 0, "by": "test"}')
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.wait(timeout=120) == 0
    ex = run.json("exit.json")
    assert ex["killed_by"] == "abort" and ex["checkpoints_verified"] >= 1
    (saved,) = sorted((run.dir / "checkpoints").glob("ckpt-*.pt"))
    record = run.json(f"checkpoints/{saved.stem}.verify.json")
    assert record["verified"] is True
