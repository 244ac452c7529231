"""Console test helpers: a campaign of tiny real scripts (one that plants a NaN loss), the live
runner started and stopped around a test, and driving the app's tick by hand until a condition
holds (generous deadlines, no fixed sleeps)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers_runner import STEPS_SCRIPT, iso

NAN_SCRIPT = r"""
import json, os, sys, time
run_dir = os.environ["CAMPAIGN_RUN_DIR"]
good, delay = int(sys.argv[1]), float(sys.argv[2])
with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
    for step in range(10_000):
        loss = 2.0 / (step + 1) if step < good else float("nan")
        f.write(json.dumps({"t": time.time(), "step": step, "loss": loss}) + "\n")
        f.flush()
        time.sleep(delay)
"""


def write_live_campaign(
    root: Path, *, started_at: float | None = None, days: int = 3, retrieval_hours: float = 2
) -> Path:
    """Three variants, none queued by a phase (the test starts them with keys): `control` and
    `wide` run long and slowly, `planted` writes a NaN loss after a few steps."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "steps.py").write_text(STEPS_SCRIPT)
    (root / "nan.py").write_text(NAN_SCRIPT)
    started_at = time.time() - 3600 if started_at is None else started_at
    py = sys.executable
    text = f'''[campaign]
name = "console-live"
question = "does the console drive a real runner?"

[decision]
metric = "loss"
higher_is_better = false
control = "control"

[bundle]
gpu = "RTX 4090"
days = {days}
started_at = {iso(started_at)}
retrieval_hours = {retrieval_hours}

[[variant]]
name = "control"
category = "essential"
command = ["{py}", "steps.py", "100000", "0.05"]
hours = 1

[[variant]]
name = "planted"
category = "exploratory"
command = ["{py}", "nan.py", "15", "0.05"]
hours = 1

[[variant]]
name = "wide"
category = "useful"
command = ["{py}", "steps.py", "100000", "0.05"]
hours = 1

[[rule]]
kind = "nonfinite"
metric = "loss"
'''
    path = root / "campaign.toml"
    path.write_text(text)
    return path


async def tick_until(
    app: Any, pilot: Any, cond: Callable[[], Any], *, timeout: float = 60.0, what: str = "condition"
) -> Any:
    """Tick the app (status, GPUs, metrics, screen) until `cond()` is truthy."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        await app.tick()
        await pilot.pause()
        last = cond()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def run_row(app: Any, variant: str) -> dict | None:
    for r in (app.snapshot or {}).get("runs") or []:
        if r.get("variant") == variant:
            return r
    return None


def write_pilot_campaign(root: Path, *, started_at: float | None = None) -> Path:
    """A pilot phase with a short `control` (it finishes in about a second, ending the pilot), then
    a main phase of two long runs: with one slot, `wide` runs and `extra` waits in the queue, so
    a cut at the pilot decision has a queued run to drop."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "steps.py").write_text(STEPS_SCRIPT)
    started_at = time.time() - 3600 if started_at is None else started_at
    py = sys.executable
    text = f'''[campaign]
name = "console-pilot"
question = "does the console record the pilot decision?"

[bundle]
gpu = "RTX 4090"
days = 3
started_at = {iso(started_at)}
retrieval_hours = 2

[[phase]]
name = "pilot"
variants = ["control"]

[[phase]]
name = "main runs"
variants = ["wide", "extra"]

[[variant]]
name = "control"
category = "essential"
command = ["{py}", "steps.py", "20", "0.02"]
hours = 1

[[variant]]
name = "wide"
category = "essential"
command = ["{py}", "steps.py", "100000", "0.05"]
hours = 1

[[variant]]
name = "extra"
category = "exploratory"
command = ["{py}", "steps.py", "100000", "0.05"]
hours = 1

[[rule]]
kind = "nonfinite"
metric = "loss"
'''
    path = root / "campaign.toml"
    path.write_text(text)
    return path
