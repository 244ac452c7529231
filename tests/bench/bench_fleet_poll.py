"""What the console's poll of several hosts costs each second (prints figures; not collected by pytest).

Two real runners stand for two hosts, each with 1,000 finished runs and 8 running runs writing 100
metric lines a second (`bench_scale.py`'s campaign). The SSH hop is left out: each host's request
goes straight to its runner's socket, so the figures are what the runners send and what this side
decodes and merges. A whole poll (each host's complete snapshot: what every second cost before)
against a poll of what changed (`runner.daemon.fleet_poll`), median of 10 each.

    python tests/bench/bench_fleet_poll.py [--finished 1000]
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

import msgspec  # noqa: E402
from bench_scale import RUNNING, write_campaign  # noqa: E402
from helpers_hosts import two_host_brief  # noqa: E402

from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon import client, control  # noqa: E402
from runner.daemon.fleet import Fleet  # noqa: E402
from runner.daemon.fleet_poll import FleetPoller  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--finished", type=int, default=1000)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    os.environ["CAMPAIGN_SLOTS"] = str(RUNNING)
    os.environ["CAMPAIGN_GRACE_SECONDS"] = "5"
    for name in ("a", "b"):
        (base / name).mkdir()
    folders = {name: write_campaign(base / name, args.finished, run_seconds=300) for name in ("a", "b")}
    sent: list[int] = []

    def request(self: Fleet, name: str, op: str, **kw):
        reply = client.request(folders[name], op, **kw)
        sent.append(len(msgspec.json.encode(reply)))
        return reply

    Fleet.request = request  # type: ignore[method-assign]  # the SSH hop left out (see above)
    try:
        for file in folders.values():
            control.up(load_campaign(file))
        time.sleep(15)  # the runs start, the runners settle
        fleet = Fleet(load_campaign(two_host_brief(base / "user")))

        def measure(poll) -> tuple[float, float]:
            times, sizes = [], []
            for _ in range(10):
                sent.clear()
                t = time.perf_counter()
                poll()
                times.append(time.perf_counter() - t)
                sizes.append(sum(sent))
                time.sleep(1.0)
            return statistics.median(times), statistics.median(sizes)

        whole_s, whole_b = measure(fleet.status)
        poller = FleetPoller(fleet)
        poller.poll()
        delta_s, delta_b = measure(poller.poll)
        print(f"2 hosts x ({args.finished:,} finished + {RUNNING} running, 100 lines/s each), median of 10 polls:")
        print(f"  whole snapshots: {whole_s * 1000:.0f} ms, {whole_b / 2**20:.2f} MB from the runners a poll")
        print(f"  what changed:    {delta_s * 1000:.0f} ms, {delta_b / 2**10:.1f} KB from the runners a poll")
        print(f"  ratio: {whole_s / delta_s:.1f}x the time, {whole_b / delta_b:.0f}x the bytes")
        fleet.close()
    finally:
        for file in folders.values():
            control.down(load_campaign(file), abort_runs=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
