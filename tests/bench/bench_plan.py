"""How long planning takes: load + schedule + options for campaigns of growing size, and the
`campaign plan` command end to end (interpreter start included). Prints figures; asserts nothing."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers_plan import variant, write_campaign  # noqa: E402

from runner.campaign.model import load_campaign  # noqa: E402
from runner.campaign.plan import plan_campaign, plan_text  # noqa: E402


def timed(fn, repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for n in (3, 30, 300):
            cats = ("essential", "useful", "exploratory")
            vs = [variant(f"v{i}", 1 + i % 5, cats[i % 3]) for i in range(n)]
            path = write_campaign(
                Path(tmp) / f"c{n}",
                bundle={"gpu": "B200", "price_usd": 500.0},
                variants=vs,
                phases=[{"name": "setup", "hours": 2}, {"name": "runs", "variants": [v["name"] for v in vs]}],
            )
            load = timed(lambda path=path: load_campaign(path))
            c = load_campaign(path)
            plan = timed(lambda c=c: plan_campaign(c))
            text = timed(lambda c=c: plan_text(plan_campaign(c)))
            print(
                f"{n:4d} variants: load {load * 1e3:7.1f} ms  plan+options {plan * 1e3:7.1f} ms  "
                f"plan+text {text * 1e3:7.1f} ms"
            )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        example = str(ROOT / "examples" / "rank-ablation")
        for args in (["plan", example, "--json"], ["plan", example], ["check", example]):
            wall = timed(
                lambda args=args: subprocess.run(
                    [sys.executable, "-m", "runner", *args], env=env, capture_output=True, check=True
                ),
                repeat=3,
            )
            print(f"campaign {' '.join(a for a in args if a != example):12s} end to end {wall * 1e3:7.0f} ms")


if __name__ == "__main__":
    main()
