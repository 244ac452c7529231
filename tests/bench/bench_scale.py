"""What an idle campaign costs as finished runs pile up (prints figures; not collected by pytest).

For 1,000 and 10,000 finished runs (written into the ledger before `up`) plus 8 running runs each
writing 100 metric lines a second, on a real runner with a real console attached (headless, 80x24,
1 s refresh, in a fresh interpreter):
- the console's CPU share of one core while idle, beside a bare Textual app's floor measured in the
  same run (a DataTable and a Sparkline redrawn each second): goal under 1.5x the floor at 1,000;
- the runner's CPU share over the same window, a console attached: goal under 1 % at 1,000;
- at 10,000: both within 1.5x of their 1,000-run figures, the console's first full frame (fresh
  interpreter, imports included) under 1.5 s, and `campaign status --json` under 1 s.

    python tests/bench/bench_scale.py [--sizes 1000 10000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


import psutil  # noqa: E402

from runner.campaign.model import load_campaign  # noqa: E402
from runner.closing import pilot  # noqa: E402
from runner.daemon import client, control  # noqa: E402
from runner.ledger import store as L  # noqa: E402

RUNNING = 8
RATE = 100.0

WRITER = r"""
import json, os, sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
path = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
t0 = time.time(); i = 0
with open(path, "a") as f:
    while time.time() - t0 < seconds:
        f.write(json.dumps({"t": time.time(), "step": i, "loss": 2.0 / (1 + i), "samples": 32}) + "\n")
        f.flush()
        i += 1
        time.sleep(max(0.0, t0 + i / rate - time.time()))
"""

FLOOR = r"""
import asyncio, json, sys, time
import psutil
from textual.app import App
from textual.widgets import DataTable, Sparkline
class Bare(App):
    def compose(self):
        yield DataTable()
        yield Sparkline([1, 2, 3])
    def on_mount(self):
        t = self.query_one(DataTable)
        t.add_columns("run", "state", "step", "loss")
        for i in range(8):
            t.add_row(f"v{i}", "running", "0", "1.0", key=str(i))
        self.n = 0
        self.set_interval(1.0, self.tick)
    def tick(self):
        self.n += 1
        t = self.query_one(DataTable)
        for i in range(8):
            t.update_cell(str(i), t.ordered_columns[2].key, str(self.n * 10 + i))
        s = self.query_one(Sparkline)
        s.data = [*s.data[-59:], self.n % 7]
app = Bare()
out = {}
async def watch():
    await asyncio.sleep(5)
    p = psutil.Process()
    c0, w0 = sum(p.cpu_times()[:2]), time.monotonic()
    await asyncio.sleep(float(sys.argv[1]))
    out["cpu"] = (sum(p.cpu_times()[:2]) - c0) / (time.monotonic() - w0)
    app.exit()
async def main():
    w = asyncio.ensure_future(watch())
    await app.run_async(headless=True, size=(80, 24))
    await w
asyncio.run(main())
print(json.dumps(out))
"""

CONSOLE = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
from console.app import make_app
from runner.campaign.model import load_campaign
import psutil
app = make_app(campaign=load_campaign({file!r}), use_user_keymap=False, refresh_seconds=1.0)
out = {{}}
async def watch():
    while app.ticks < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    out["first_frame_s"] = time.perf_counter() - t0
    await asyncio.sleep(5)
    me, runner = psutil.Process(), psutil.Process(app.snapshot["runner"]["pid"])
    c0, r0, w0 = sum(me.cpu_times()[:2]), sum(runner.cpu_times()[:2]), time.monotonic()
    await asyncio.sleep({idle})
    w = time.monotonic() - w0
    out["console_cpu"] = (sum(me.cpu_times()[:2]) - c0) / w
    out["runner_cpu"] = (sum(runner.cpu_times()[:2]) - r0) / w
    out["runs"] = len(app.snapshot["runs"])
    out["deltas"] = app.source.deltas
    out["rss_mb"] = me.memory_info().rss / 2**20
    app.exit()
async def main():
    w = asyncio.ensure_future(watch())
    await app.run_async(headless=True, size=(80, 24))
    await w
asyncio.run(main())
print(json.dumps(out))
"""


def _child(code: str, *args: str, timeout: float = 300) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit("a benchmark child failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def floor(seconds: float) -> float:
    return _child(FLOOR, str(seconds))["cpu"]


def write_campaign(base: Path, finished: int, run_seconds: float) -> Path:
    (base / "writer.py").write_text(WRITER)
    names = [f"v{i}" for i in range(RUNNING)]
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    text = [
        f'[campaign]\nname = "bench"\nquestion = "q"\n[bundle]\ngpu = "RTX 4090"\ndays = 30\n'
        f'started_at = {start}\n[[phase]]\nname = "main"\nvariants = [{", ".join(json.dumps(n) for n in names)}]\n'
    ]
    for n in [*names, "old"]:
        text.append(
            f'[[variant]]\nname = "{n}"\ncategory = "essential"\n'
            f'command = ["{sys.executable}", "writer.py", "{RATE}", "{run_seconds}"]\nhours = 1\n'
        )
    text.append('[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n')
    (base / "campaign.toml").write_text("\n".join(text))
    c = load_campaign(base)
    led = L.Ledger(base / ".campaign" / "ledger.sqlite")
    now = time.time() - 7200
    for i in range(finished):
        rid = f"old-{i:08x}"
        led.insert_run(
            {
                "id": rid,
                "variant": "old",
                "category": "essential",
                "config_hash": f"{i:08x}",
                "state": "finished" if i % 10 else "stopped",
                "run_dir": str(base / "runs" / rid),
                "planned_hours": 1,
                "queued_at": now + i * 0.1,
                "launched_at": now + i * 0.1,
                "attempt_started_at": now + i * 0.1,
                "ended_at": now + i * 0.1 + 60,
                "active_seconds": 60.0,
                "attempts": 1,
                **({} if i % 10 else {"stop_reason": "loss is nan at step 140", "stop_rule": "nonfinite"}),
            }
        )
        recs = [{"t": now + i * 0.1 + 60, "step": 1000, "loss": 0.5 + (i % 7) / 10, "dev_acc": 0.8, "samples": 32}]
        led.record_metrics(rid, recs, offset=100, bad_lines=0, restarts=0)
    # a rental with this many ended runs is long past its pilot: its decision is in the ledger (the
    # runner refuses `decide` while the 8 running runs have not reached a checkpoint)
    pilot.record_decision(led.conn, c, "continue", [], "bench", "bench")
    led.close()
    return c.path


def one_size(finished: int, seconds: float) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"bench-scale-{finished}-"))
    os.environ["CAMPAIGN_SLOTS"] = str(RUNNING)
    os.environ["CAMPAIGN_GRACE_SECONDS"] = "5"
    file = write_campaign(base, finished, run_seconds=seconds + 120)
    c = load_campaign(file)
    out: dict = {"finished": finished}
    try:
        t = time.perf_counter()
        control.up(c)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            snap = client.request(c, "status")
            if sum(1 for r in snap["runs"] if r["state"] == "running" and (r["step"] or 0) > 50) == RUNNING:
                break
            time.sleep(0.5)
        else:
            raise SystemExit("runs did not all start")
        out["up_to_running_s"] = time.perf_counter() - t
        # the start brings the output folder up to date (a pass over every run, off the loop):
        # wait for that one-off pass to end, so the window below measures the idle steady state
        runner = psutil.Process(client.request(c, "status")["runner"]["pid"])
        settle = time.monotonic() + 180
        while time.monotonic() < settle:
            c0 = sum(runner.cpu_times()[:2])
            time.sleep(3)
            if (sum(runner.cpu_times()[:2]) - c0) / 3 < 0.1:
                break
        out["settled_s"] = time.perf_counter() - t - out["up_to_running_s"]
        times = []
        for _ in range(3):
            t = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from runner.cli import main; sys.exit(main())",
                    "status",
                    str(file),
                    "--json",
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=60,
            )
            times.append(time.perf_counter() - t)
            assert proc.returncode == 0, proc.stderr
        out["status_json_s"] = min(times)
        out["status_json_mb"] = len(proc.stdout) / 2**20
        res = _child(CONSOLE.format(root=str(ROOT), file=str(file), idle=seconds))
        out.update(res)
    finally:
        try:
            control.down(c, abort_runs=True, timeout=60)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    bare = floor(args.seconds)
    print(f"bare Textual floor (DataTable + Sparkline redrawn each second): {100 * bare:.2f} % of one core")
    results = [one_size(n, args.seconds) for n in args.sizes]
    for r in results:
        print(
            f"{r['finished']:>6,} finished + {RUNNING} running ({RATE:g} lines/s each): "
            f"console {100 * r['console_cpu']:.2f} % ({r['console_cpu'] / bare:.2f}x floor), "
            f"runner {100 * r['runner_cpu']:.2f} %, first frame {r['first_frame_s']:.2f} s, "
            f"status --json {r['status_json_s']:.2f} s ({r['status_json_mb']:.1f} MB), "
            f"console RSS {r['rss_mb']:.0f} MB, {r['deltas']} deltas applied"
        )
    if len(results) >= 2:
        a, b = results[0], results[-1]
        print(
            f"{b['finished']:,} vs {a['finished']:,}: console {b['console_cpu'] / a['console_cpu']:.2f}x, "
            f"runner {b['runner_cpu'] / a['runner_cpu']:.2f}x"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
