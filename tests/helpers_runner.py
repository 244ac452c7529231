"""Test helpers for the runner: a throwaway campaign folder with tiny Python variants, polling with
generous deadlines, and a clean-up that ends every process the test started (found by its
working directory or command line inside the test's own temporary folder, one pid at a time)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

STEPS_SCRIPT = r"""
import json, os, sys, time
run_dir = os.environ["CAMPAIGN_RUN_DIR"]
n, delay = int(sys.argv[1]), float(sys.argv[2])
nan_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
attempt = int(os.environ.get("CAMPAIGN_ATTEMPT", "1"))
path = os.path.join(run_dir, "metrics.jsonl")
start = 0
if attempt > 1 and os.path.exists(path):
    with open(path) as f:
        start = sum(1 for _ in f)
with open(path, "a") as f:
    for step in range(start, n):
        f.write(json.dumps({"t": time.time(), "step": step, "loss": float("nan") if step == nan_at else 1.0 / (step + 1),
                            "attempt": attempt}) + "\n")
        f.flush()
        time.sleep(delay)
"""


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_campaign(
    root: Path,
    variants: list[dict[str, Any]],
    *,
    phase: list[str] | None = None,
    started_at: float | None = None,
    days: int = 3,
    retrieval_hours: float = 2,
    rules: str = '[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n',
) -> Path:
    """campaign.toml with `variants` (name, category, n, delay, hours, extra toml lines)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "steps.py").write_text(STEPS_SCRIPT)
    started_at = time.time() - 3600 if started_at is None else started_at
    names = [v["name"] for v in variants] if phase is None else phase
    parts = [
        f'[campaign]\nname = "t"\nquestion = "q"\n\n[bundle]\ngpu = "RTX 4090"\ndays = {days}\n'
        f"started_at = {iso(started_at)}\nretrieval_hours = {retrieval_hours}\n"
    ]
    if names:
        parts.append('[[phase]]\nname = "main"\nvariants = [' + ", ".join(f'"{n}"' for n in names) + "]\n")
    for v in variants:
        parts.append(
            f'[[variant]]\nname = "{v["name"]}"\ncategory = "{v.get("category", "essential")}"\n'
            f'command = ["{sys.executable}", "steps.py", "{v.get("n", 20)}", "{v.get("delay", 0.05)}"'
            + (f', "{v["nan_at"]}"' if "nan_at" in v else "")
            + "]\n"
            f"hours = {v.get('hours', 1)}\n" + v.get("extra", "")
        )
    parts.append(rules)
    path = root / "campaign.toml"
    path.write_text("\n".join(parts))
    return path


def wait_for(cond: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def run_of(snap: dict, variant: str) -> dict | None:
    for r in snap["runs"]:
        if r["variant"] == variant:
            return r
    return None


def processes_under(root: Path) -> list[psutil.Process]:
    """Processes whose working directory or command line lies inside `root` (this test's folder)."""
    root_s = str(root.resolve())
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if p.pid == me:
            continue
        try:
            cwd = p.info.get("cwd") or ""
            cmd = " ".join(p.info.get("cmdline") or [])
        except psutil.Error:
            continue
        if cwd.startswith(root_s) or root_s in cmd:
            out.append(p)
    return out


def kill_processes_under(root: Path) -> None:
    for p in processes_under(root):
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(processes_under(root), timeout=10)
