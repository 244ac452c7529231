"""Console benchmarks (prints figures; not collected by pytest):

1. drawing the loss plot for 8 runs of 1,000,000 points each (goal: under 50 ms a frame);
2. console CPU share of one core while idle at a 1 s refresh, 8 runs running on a real runner
   (goal: under 3 %);
3. start-up to the first full frame, in a fresh interpreter (goal: under 1.5 s);
4. resident memory of that console, with 8 runs' histories loaded (goal: under 150 MB), and
   torch never imported (asserted).

    python tests/bench/bench_console.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "tests"):
    sys.path.insert(0, str(p))

import numpy as np  # noqa: E402

N_RUNS = 8
POINTS = 1_000_000


def bench_plot() -> None:
    from console.plot_canvas import Trace, render_plot
    from console.series import SeriesStore, ema

    rng = np.random.default_rng(0)
    stores = []
    t = time.perf_counter()
    for i in range(N_RUNS):
        s = SeriesStore()
        x = np.arange(POINTS, dtype=np.float64)
        y = 3 * np.exp(-x / (1e5 * (i + 1))) + 0.2 * rng.random(POINTS)
        for a in range(0, POINTS, 100_000):  # arrives in chunks, as from the file
            s.append(x[a : a + 100_000], y[a : a + 100_000])
        stores.append(s)
    load = time.perf_counter() - t
    width, height = 78, 14
    columns = (width - 8) * 2
    for smooth in (0.0, 0.6):
        for log in (False, True):
            times = []
            for _ in range(20):
                t = time.perf_counter()
                traces = []
                for i, s in enumerate(stores):
                    r = s.reduce(0, POINTS - 1, columns, log=log)
                    traces.append(Trace(f"run{i}", "green", r.vmin, r.vmax, ema(r.mean, smooth) if smooth else None))
                render_plot(traces, width, height, x_lo=0, x_hi=POINTS - 1, log=log)
                times.append(time.perf_counter() - t)
            print(
                f"plot: {N_RUNS} runs x {POINTS:,} points, {width}x{height}, smooth {smooth}, log {log}: "
                f"median {1000 * np.median(times):.1f} ms, max {1000 * max(times):.1f} ms a frame"
            )
    print(f"plot: appending {N_RUNS} x {POINTS:,} points into the pyramids took {load:.2f} s (once)")


CHILD = r"""
import sys, time, json, os
t0 = time.perf_counter()
sys.path[:0] = [{root!r}, {tests!r}]
from console.app import make_app
from runner.campaign.model import load_campaign
import psutil
campaign = load_campaign({file!r})
app = make_app(campaign=campaign, use_user_keymap=False, refresh_seconds=1.0)
out = {{}}
proc = psutil.Process()
async def watch():
    import asyncio
    while app.ticks < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # let the frame be drawn
    out["first_frame_s"] = time.perf_counter() - t0
    await asyncio.sleep(5)  # warm-up: histories loaded, NVML and psutil primed
    c0, w0 = sum(proc.cpu_times()[:2]), time.monotonic()
    await asyncio.sleep({idle})
    c1, w1 = sum(proc.cpu_times()[:2]), time.monotonic()
    out["cpu_share"] = (c1 - c0) / (w1 - w0)
    out["ticks"] = app.ticks
    out["rss_mb"] = proc.memory_info().rss / 2**20
    out["torch"] = "torch" in sys.modules
    out["runs"] = len((app.snapshot or {{}}).get("runs") or [])
    out["points"] = sum(len(t.series) for t in app.main_screen.query_one("#plot").tails.tails.values())
    app.exit()
async def main():
    import asyncio
    task = None
    async def go():
        await app.run_async(headless=True, size=(80, 24))
    w = asyncio.ensure_future(watch())
    await go()
    await w
import asyncio
asyncio.run(main())
print(json.dumps(out))
"""


def bench_live(idle_seconds: float = 20.0) -> None:
    from helpers_runner import STEPS_SCRIPT, kill_processes_under

    from runner.campaign.model import load_campaign
    from runner.daemon import control

    base = Path(tempfile.mkdtemp(prefix="bench-console-"))
    root = base / "camp"
    root.mkdir()
    (root / "steps.py").write_text(STEPS_SCRIPT)
    names = [f"v{i}" for i in range(N_RUNS)]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    text = (
        f'[campaign]\nname = "bench"\nquestion = "q"\n\n[bundle]\ngpu = "RTX 4090"\ndays = 3\n'
        f'started_at = {started}\nretrieval_hours = 2\n\n[[phase]]\nname = "main"\n'
        f"variants = [{', '.join(json.dumps(n) for n in names)}]\n"
    )
    for n in names:  # each run writes 10 metric lines a second
        text += (
            f'\n[[variant]]\nname = "{n}"\ncategory = "essential"\n'
            f'command = ["{sys.executable}", "steps.py", "1000000", "0.1"]\nhours = 1\n'
        )
    text += '\n[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n'
    (root / "campaign.toml").write_text(text)
    campaign = load_campaign(root / "campaign.toml")
    os.environ["CAMPAIGN_SLOTS"] = str(N_RUNS)
    try:
        control.up(campaign)
        deadline = time.monotonic() + 60
        from runner.daemon import client

        while time.monotonic() < deadline:
            snap = client.request(campaign, "status")
            if sum(1 for r in snap["runs"] if r["state"] == "running") == N_RUNS:
                break
            time.sleep(0.5)
        code = CHILD.format(
            root=str(ROOT), tests=str(ROOT / "tests"), file=str(root / "campaign.toml"), idle=idle_seconds
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit("the console child failed")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        assert not res["torch"], "the console imported torch"
        print(f"start-up to first full frame: {res['first_frame_s']:.2f} s (fresh interpreter, imports included)")
        print(
            f"idle CPU at 1 s refresh, {res['runs']} runs on a real runner ({res['points']:,} points loaded): "
            f"{100 * res['cpu_share']:.1f} % of one core over {idle_seconds:g} s ({res['ticks']} ticks)"
        )
        print(f"RSS: {res['rss_mb']:.0f} MB; torch imported: {res['torch']}")
    finally:
        try:
            control.down(campaign, abort_runs=True, timeout=30)
        finally:
            kill_processes_under(base)
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    bench_plot()
    bench_live()
