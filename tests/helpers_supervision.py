"""Helpers for the supervision tests: a campaign folder with one run folder, real scripts, and a
real `python -m runner.supervision.supervisor` process that every test waits for and cleans up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import tomli_w

ROOT = Path(__file__).resolve().parents[1]


class RunFolder:
    def __init__(self, campaign: Path, run_id: str = "control-0000abcd") -> None:
        self.campaign = campaign
        self.dir = campaign / "runs" / run_id
        self.dir.mkdir(parents=True)
        self.run_id = run_id
        self.proc: subprocess.Popen | None = None

    def script(self, name: str, body: str) -> str:
        path = self.campaign / name
        path.write_text(textwrap.dedent(body))
        return name

    def write(
        self,
        argv: list[str],
        rules: list[dict] = (),
        *,
        grace: float = 5.0,
        attempt: int = 1,
        variant_extra: dict | None = None,
        env: dict | None = None,
        resume_from: str | None = None,
    ) -> None:
        variant = {"name": "control", "category": "essential", "command": argv, "hours": 1.0}
        variant.update(variant_extra or {})
        config = {
            "run": {"id": self.run_id, "variant": "control", "category": "essential", "campaign": str(self.campaign)},
            "variant": variant,
            "rule": list(rules),
            "env": env or {},
        }
        (self.dir / "run.toml").write_text(tomli_w.dumps(config))
        (self.dir / "launch.json").write_text(
            json.dumps(
                {"attempt": attempt, "argv": argv, "env": {}, "grace_seconds": grace, "resume_from": resume_from}
            )
        )

    def start(self) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner.supervision.supervisor", str(self.dir)],
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        return self.proc

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cleanup()
            raise AssertionError("the supervisor did not finish in time:\n" + self.log()) from None

    def run(self, timeout: float = 60.0) -> int:
        self.start()
        return self.wait(timeout)

    def json(self, name: str):
        with open(self.dir / name) as f:
            return json.load(f)

    def log(self) -> str:
        p = self.dir / "output.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc is not None and self.proc.poll() is not None and not predicate():
                raise AssertionError(f"supervisor ended before {what}:\n{self.log()}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log()}")

    def cleanup(self) -> None:
        """Kill anything the test left: the supervisor and every process of its tree."""
        if self.proc is None:
            return
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs + ([psutil.Process(self.proc.pid)] if psutil.pid_exists(self.proc.pid) else []):
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout:
            self.proc.stdout.close()


def all_gone(pids: list[int], timeout: float = 10.0) -> bool:
    """True once none of `pids` runs (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.05)


# A metrics writer the scripts import: the harness's line format, written line by line.
METRIC_WRITER = """
import json, os, time
_f = open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl"), "a")
def emit(**kw):
    kw.setdefault("t", time.time())
    _f.write(json.dumps(kw) + "\\n"); _f.flush()
"""
