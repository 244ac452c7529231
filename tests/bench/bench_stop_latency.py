"""How fast a broken rule stops a run, and what the supervisor costs while it watches.

Prints, over N trials (default 60): the time from a non-finite loss line being written (the clock
is read just before the write call, so the figures include the write itself) to
`metrics.jsonl` to SIGTERM being sent to the run's group (the supervisor's `exit.json` `term_at`),
and to the whole process tree (the training process and a child) being gone (`tree_gone_at`);
then the supervisors' CPU share and RSS while 8 runs each write 100 metric lines a second.

    python tests/bench/bench_stop_latency.py [--trials 60] [--poll] [--cpu-seconds 10]

`--poll` measures the fallback poll used where inotify is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import tomli_w

ROOT = Path(__file__).resolve().parents[2]

TRIAL = r"""
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
f = open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl"), "a")
for i in range(15):
    f.write(json.dumps({"t": time.time(), "step": i, "loss": 1.0}) + "\n"); f.flush()
    time.sleep(0.02)
import signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})    # record the time before dying
line = json.dumps({"t": time.time(), "step": 99, "loss": float("nan")}) + "\n"
written = time.time()            # just before the write: the figures are upper bounds
f.write(line); f.flush()
open("written_at", "w").write(repr(written))
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
while True:
    time.sleep(1)
"""

STEADY = r"""
import json, os, time
f = open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl"), "a")
every = int(os.environ.get("BENCH_FLUSH_LINES", "1"))     # 1: a write per line; 50: the harness's 0.5 s
i = 0
t0 = time.monotonic()
while True:
    i += 1
    f.write(json.dumps({"t": time.time(), "step": i, "loss": 1.0 / i, "truncated": 0, "samples": 64}) + "\n")
    if i % every == 0:
        f.flush()
    time.sleep(max(0.0, t0 + i / 100.0 - time.monotonic()))
"""


def make_run(base: Path, name: str, script: str, rules: list[dict]) -> Path:
    camp = base / name
    run_dir = camp / "runs" / name
    run_dir.mkdir(parents=True)
    (camp / "train.py").write_text(script)
    argv = [sys.executable, "train.py"]
    (run_dir / "run.toml").write_text(
        tomli_w.dumps(
            {
                "run": {"id": name, "variant": "v", "root": str(camp)},
                "variant": {"name": "v", "command": argv},
                "rule": rules,
            }
        )
    )
    (run_dir / "launch.json").write_text(
        json.dumps({"attempt": 1, "argv": argv, "env": {}, "grace_seconds": 5, "resume_from": None})
    )
    return run_dir


def start_supervisor(run_dir: Path, poll: bool, flush_lines: int = 1) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_FLUSH_LINES=str(flush_lines))
    if poll:
        env["CAMPAIGN_SUPERVISOR_POLL"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "runner.supervision.supervisor", str(run_dir)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def latency(trials: int, poll: bool) -> None:
    to_term, to_gone = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(trials):
            run_dir = make_run(Path(tmp), f"t{n}", TRIAL, [{"kind": "nonfinite", "metric": "loss"}])
            sup = start_supervisor(run_dir, poll)
            try:
                sup.wait(timeout=60)
            except subprocess.TimeoutExpired:
                sup.kill()
                print(f"trial {n}: supervisor did not finish", file=sys.stderr)
                continue
            ex = json.loads((run_dir / "exit.json").read_text())
            written = float((run_dir.parent.parent / "written_at").read_text())
            to_term.append((ex["term_at"] - written) * 1000)
            to_gone.append((ex["tree_gone_at"] - written) * 1000)
    mode = "fallback poll" if poll else "inotify"
    print(f"stop latency ({mode}), {len(to_term)} trials, ms from the NaN line written to:")
    for label, xs in (("SIGTERM sent", to_term), ("process tree gone", to_gone)):
        print(
            f"  {label:18s} median {statistics.median(xs):7.2f}  p99 {pct(xs, 0.99):7.2f}  "
            f"min {min(xs):7.2f}  max {max(xs):7.2f}"
        )


def cpu(seconds: float, flush_lines: int, poll: bool, runs: int = 8) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sups = []
        for n in range(runs):
            run_dir = make_run(
                Path(tmp),
                f"s{n}",
                STEADY,
                [{"kind": "nonfinite"}, {"kind": "truncated"}, {"kind": "stalled", "within": "1m"}],
            )
            sups.append(start_supervisor(run_dir, poll=poll, flush_lines=flush_lines))
        try:
            time.sleep(3.0)  # imports and start-up are not steady state
            procs = [psutil.Process(s.pid) for s in sups]
            before = [sum(p.cpu_times()[:2]) for p in procs]
            lines_before = [
                (Path(tmp) / f"s{n}" / "runs" / f"s{n}" / "metrics.jsonl").stat().st_size for n in range(runs)
            ]
            t0 = time.monotonic()
            time.sleep(seconds)
            wall = time.monotonic() - t0
            after = [sum(p.cpu_times()[:2]) for p in procs]
            rss = [p.memory_info().rss for p in procs]
            grown = sum(
                (Path(tmp) / f"s{n}" / "runs" / f"s{n}" / "metrics.jsonl").stat().st_size for n in range(runs)
            ) - sum(lines_before)
        finally:
            for s in sups:
                s.terminate()
            for s in sups:
                s.wait(timeout=30)
    used = [(a - b) / wall * 100 for a, b in zip(after, before)]
    how = "a write per line" if flush_lines == 1 else f"a write per {flush_lines} lines"
    how += ", fallback poll" if poll else ", inotify"
    print(
        f"supervisors' CPU while {runs} runs each write 100 lines/s, {how} ({wall:.1f} s, "
        f"{grown / 1e6:.2f} MB of metrics):"
    )
    print(
        f"  all {runs} together {sum(used):.2f}% of one core; per supervisor median "
        f"{statistics.median(used):.2f}%, max {max(used):.2f}%"
    )
    print(f"  RSS per supervisor median {statistics.median(rss) / 2**20:.1f} MiB, max {max(rss) / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--poll", action="store_true", help="measure the fallback poll instead of inotify")
    ap.add_argument("--cpu-seconds", type=float, default=10.0)
    ap.add_argument("--skip-cpu", action="store_true")
    args = ap.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    latency(args.trials, args.poll)
    if not args.skip_cpu:
        cpu(args.cpu_seconds, flush_lines=1, poll=args.poll)
        cpu(args.cpu_seconds, flush_lines=50, poll=args.poll)


if __name__ == "__main__":
    main()
