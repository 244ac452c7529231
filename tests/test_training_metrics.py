"""Metric reporting: the line format, flushing while the run goes on, exit and signal paths."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from helpers_training import env_for, read_lines, training_run_dir, wait_for  # noqa: F401 (fixture)


def _script(tmp_path, body: str):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def _run(tmp_path, body, run_dir=None):
    env = env_for(run_dir or tmp_path / "run")
    if run_dir is False:
        env.pop("CAMPAIGN_RUN_DIR")
    return subprocess.run(
        [sys.executable, str(_script(tmp_path, body))],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_lines_follow_the_internals_format(tmp_path):
    r = _run(
        tmp_path,
        """
        import math, torch
        from campaign_train import metrics
        metrics.report(1, loss=torch.tensor(2.5), truncated=3, samples=64, lr=1e-3)
        metrics.report(2, loss=float("nan"))
        metrics.report(3, loss=math.inf, dev_acc=0.61)
        metrics.event("checkpoint", step=3, path="x.pt", bytes=10, write_seconds=0.1, holds=["model"])
    """,
    )
    assert r.returncode == 0, r.stderr
    raw = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert raw.endswith("\n") and "NaN" in raw and "Infinity" in raw
    lines = [json.loads(x) for x in raw.splitlines()]
    assert lines[0]["event"] == "start" and lines[0]["resumed_from"] is None and lines[0]["attempt"] == 1
    assert lines[1] == {"t": lines[1]["t"], "step": 1, "loss": 2.5, "lr": 1e-3, "truncated": 3, "samples": 64}
    assert lines[2]["loss"] != lines[2]["loss"]  # NaN read back as NaN
    assert lines[3]["loss"] == float("inf") and lines[3]["dev_acc"] == 0.61
    assert lines[4]["event"] == "checkpoint" and lines[4]["holds"] == ["model"]
    assert lines[5]["event"] == "end" and lines[5]["status"] == "ok"
    assert all(isinstance(x["t"], float) for x in lines)


def test_lines_are_flushed_while_the_run_keeps_going(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(
                _script(
                    tmp_path,
                    """
        import time
        from campaign_train import metrics
        metrics.report(7, loss=1.0)
        time.sleep(120)
    """,
                )
            ),
        ],
        env=env_for(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(
            lambda: any(x.get("step") == 7 for x in read_lines(run_dir / "metrics.jsonl")), "the step line", proc=proc
        )
        assert proc.poll() is None  # still sleeping: the timer thread flushed it
    finally:
        proc.kill()
        proc.communicate(timeout=60)


def test_sigterm_without_a_checkpointer_flushes_and_dies_by_the_signal(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(
                _script(
                    tmp_path,
                    """
        import time
        from campaign_train import metrics
        for i in range(10**9):
            metrics.report(i, loss=0.5)
            time.sleep(0.001)
    """,
                )
            ),
        ],
        env=env_for(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: len(read_lines(run_dir / "metrics.jsonl")) > 5, "some lines", proc=proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    raw = (run_dir / "metrics.jsonl").read_text()
    assert raw.endswith("\n")
    last = json.loads(raw.splitlines()[-1])
    assert last["event"] == "end" and last["status"] == "sigterm"


def test_a_crash_flushes_but_writes_no_end_event(tmp_path):
    r = _run(
        tmp_path,
        """
        from campaign_train import metrics
        metrics.report(1, loss=1.0)
        raise RuntimeError("boom")
    """,
    )
    assert r.returncode == 1 and "boom" in r.stderr
    lines = read_lines(tmp_path / "run" / "metrics.jsonl")
    assert [x.get("event") for x in lines] == ["start", None]


def test_a_line_cut_by_a_killed_attempt_is_closed_before_appending(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"t": 1.0, "step": 1, "loss": 2.0}\n{"t": 2.0, "st')
    r = _run(
        tmp_path,
        """
        from campaign_train import metrics
        metrics.report(2, loss=1.0)
    """,
    )
    assert r.returncode == 0, r.stderr
    raw = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert raw[1] == '{"t": 2.0, "st'  # left as it was: readers skip and count it
    assert json.loads(raw[2])["event"] == "start" and json.loads(raw[3])["step"] == 2


def test_outside_the_runner_it_writes_to_a_local_folder(tmp_path):
    r = _run(
        tmp_path,
        """
        from campaign_train import metrics
        metrics.report(1, loss=1.0)
    """,
        run_dir=False,
    )
    assert r.returncode == 0, r.stderr
    lines = read_lines(tmp_path / "campaign-run" / "metrics.jsonl")
    assert lines[1]["step"] == 1


def test_a_forked_child_writes_nothing_twice(tmp_path):
    r = _run(
        tmp_path,
        """
        import os
        from campaign_train import metrics
        metrics.report(1, loss=1.0)
        metrics.report(2, loss=1.0)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        metrics.report(3, loss=1.0)
    """,
    )
    assert r.returncode == 0, r.stderr
    steps = [x["step"] for x in read_lines(tmp_path / "run" / "metrics.jsonl") if "step" in x]
    assert steps == [1, 2, 3]


def test_report_is_cheap_enough_for_every_step(tmp_path):
    """Prints calls per second (figures, not a timed assertion: CI machines are shared)."""
    r = _run(
        tmp_path,
        """
        import time
        from campaign_train import metrics
        n = 50000
        t0 = time.perf_counter()
        for i in range(n):
            metrics.report(i, loss=0.5, dev_acc=0.1, truncated=1, samples=32)
        print(n / (time.perf_counter() - t0))
    """,
    )
    assert r.returncode == 0, r.stderr
    rate = float(r.stdout.strip())
    print(f"campaign_train.metrics.report: {rate:,.0f} calls/s")
    assert rate > 0
    assert sum(1 for x in read_lines(tmp_path / "run" / "metrics.jsonl") if "step" in x) == 50000


def test_a_non_finite_value_is_written_at_once(tmp_path):
    """The stop rule can only be as fast as the line reaching the file: a NaN is not buffered."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(
                _script(
                    tmp_path,
                    """
        import os, time
        from campaign_train import metrics
        metrics.writer()                     # started, timer thread running
        time.sleep(0.2)
        metrics.report(1, loss=1.0)
        metrics.report(2, loss=float("nan"))
        os.kill(os.getpid(), 9)              # no flush by timer, atexit or signal can happen now
    """,
                )
            ),
        ],
        env=env_for(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.communicate(timeout=120)
    lines = read_lines(run_dir / "metrics.jsonl")
    assert [x.get("step") for x in lines if "step" in x] == [1, 2]
    assert lines[-1]["loss"] != lines[-1]["loss"]
