"""The runner's CPU share of one core and its RSS while 8 runs each write 100 metric lines a second,
and how fast it catches up on a long metrics file (ledger side: decode, fold, write).

Goal (issue 4): under 2 % of one core and under 80 MB. Run: `python tests/bench/bench_runner_cpu.py
[--runs 8] [--rate 100] [--seconds 20]`. Starts a real runner on a throwaway campaign (CAMPAIGN_SLOTS
= runs), measures the runner process only (its supervisors are listed apart), then stops it with
--abort-runs and removes the folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon import client, control  # noqa: E402  (after the sys.path line above)

WRITER = r"""
import json, os, sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
path = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
t0 = time.time(); i = 0
with open(path, "a") as f:
    while time.time() - t0 < seconds:
        f.write(json.dumps({"t": time.time(), "step": i, "loss": 2.0 / (1 + i), "dev_acc": 0.5 + i * 1e-6,
                            "truncated": 0, "samples": 32}) + "\n")
        f.flush()
        i += 1
        time.sleep(max(0.0, t0 + i / rate - time.time()))
"""


def catch_up(lines: int) -> None:
    """Lines a second from a long metrics.jsonl into the ledger's summary (decode + fold + write),
    as a restarted runner catches up on a run that went on without it."""
    import json

    from runner.daemon.watcher import RunWatch
    from runner.ledger import store as L

    base = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    try:
        rd = base / "runs" / "a-00000000"
        rd.mkdir(parents=True)
        with open(rd / "metrics.jsonl", "w") as f:
            for i in range(lines):
                f.write(
                    json.dumps(
                        {
                            "t": 1e9 + i * 0.01,
                            "step": i,
                            "loss": 1.0 / (i + 1),
                            "dev_acc": 0.5,
                            "truncated": 0,
                            "samples": 32,
                        }
                    )
                    + "\n"
                )
        led = L.Ledger(base / "ledger.sqlite")
        run = {
            "id": "a-00000000",
            "variant": "a",
            "category": "essential",
            "config_hash": "00000000",
            "state": "running",
            "run_dir": str(rd),
            "planned_hours": 1,
            "attempts": 1,
        }
        led.insert_run(run)
        watch = RunWatch(led, led.run(run["id"]), root=base, metrics_regex=None, checkpoint_glob=None)
        t0 = time.perf_counter()
        watch.finish()
        dt = time.perf_counter() - t0
        print(
            f"catch-up: {lines} lines into the ledger in {dt:.2f} s = {lines / dt:,.0f} lines/s "
            f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
        watch.close()
        led.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--catch-up-lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    if args.catch_up_lines:
        catch_up(args.catch_up_lines)
    base = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    run_seconds = args.seconds + 30
    names = [f"v{i}" for i in range(args.runs)]
    (base / "writer.py").write_text(WRITER)
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    text = [
        f'[campaign]\nname = "bench"\nquestion = "q"\n[bundle]\ngpu = "RTX 4090"\ndays = 3\n'
        f'started_at = {start}\n[[phase]]\nname = "main"\nvariants = [{", ".join(repr(n).replace(chr(39), chr(34)) for n in names)}]\n'
    ]
    for n in names:
        text.append(
            f'[[variant]]\nname = "{n}"\ncategory = "essential"\n'
            f'command = ["{sys.executable}", "writer.py", "{args.rate}", "{run_seconds}"]\nhours = 1\n'
        )
    text.append('[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n')
    (base / "campaign.toml").write_text("\n".join(text))
    os.environ["CAMPAIGN_SLOTS"] = str(args.runs)
    os.environ["CAMPAIGN_GRACE_SECONDS"] = "5"
    c = load_campaign(base)
    try:
        up = control.up(c)
        runner = psutil.Process(up.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snap = client.request(c, "status")
            if sum(1 for r in snap["runs"] if r["state"] == "running" and (r["step"] or 0) > 50) == args.runs:
                break
            time.sleep(0.5)
        else:
            print("runs did not all start", file=sys.stderr)
            return 1
        time.sleep(2)
        sups = [psutil.Process(p.pid) for p in runner.children()] if runner.children() else []
        c0, t0 = runner.cpu_times(), time.monotonic()
        rss = []
        lines0 = sum(r["lines"] for r in client.request(c, "status")["runs"])
        while time.monotonic() - t0 < args.seconds:
            rss.append(runner.memory_info().rss)
            time.sleep(1.0)
        c1, t1 = runner.cpu_times(), time.monotonic()
        lines1 = sum(r["lines"] for r in client.request(c, "status")["runs"])
        cpu = (c1.user + c1.system - c0.user - c0.system) / (t1 - t0)
        print(f"runs: {args.runs} writing {args.rate:g} lines/s each for {t1 - t0:.1f} s")
        print(f"lines ingested into the ledger: {lines1 - lines0} ({(lines1 - lines0) / (t1 - t0):.0f}/s)")
        print(f"runner CPU: {cpu * 100:.2f} % of one core (goal < 2 %)")
        print(
            f"runner RSS: median {statistics.median(rss) / 2**20:.1f} MB, max {max(rss) / 2**20:.1f} MB (goal < 80 MB)"
        )
        if sups:
            print(f"(supervisors, not the runner: {len(sups)} processes)")
    finally:
        try:
            control.down(c, abort_runs=True, timeout=60)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
