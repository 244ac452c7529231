"""Helpers for the training-side tests: start real processes, poll files with generous deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOOP = Path(__file__).with_name("training_resume_loop.py")
DEADLINE_S = 120.0


def env_for(run_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("CAMPAIGN_RESUME_FROM", "CAMPAIGN_CHECKPOINT_EVERY", "CAMPAIGN_RUN_ID"):
        env.pop(k, None)
    env["CAMPAIGN_RUN_DIR"] = str(run_dir)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_loop(run_dir: Path, *args: str, timeout: float = DEADLINE_S, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LOOP), *args], env=env_for(run_dir, **env), capture_output=True, text=True, timeout=timeout
    )


def start_loop(run_dir: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(LOOP), *args],
        env=env_for(run_dir, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_lines(path: Path) -> list[dict]:
    """Complete metric lines (a last line without its newline is not read yet)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    out = []
    for line in text.split("\n")[:-1]:
        if line.strip():
            out.append(json.loads(line))
    return out


def wait_for(
    pred: Callable[[], object], what: str, deadline_s: float = DEADLINE_S, proc: subprocess.Popen | None = None
) -> object:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"process ended ({proc.returncode}) before {what}:\n{err[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def checkpoint_event(run_dir: Path, step: int) -> dict | None:
    for line in read_lines(run_dir / "metrics.jsonl"):
        if line.get("event") == "checkpoint" and line.get("step") == step:
            return line
    return None


def kill_hard(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=DEADLINE_S)


@pytest.fixture(autouse=True)
def training_run_dir(tmp_path, monkeypatch):
    """In-process Checkpointers write their metric events into the test's folder, never the repo."""
    monkeypatch.setenv("CAMPAIGN_RUN_DIR", str(tmp_path / "run"))
    for name in ("CAMPAIGN_RESUME_FROM", "CAMPAIGN_CHECKPOINT_EVERY"):
        monkeypatch.delenv(name, raising=False)
