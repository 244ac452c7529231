"""Running the grader in a fresh interpreter: the one way the supervisor, `campaign verify` and
`campaign checkpoint` grade an artifact (the same command, the same answer for the same bytes).

This module never imports torch (the console may call `verify`); the child does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.grading.result import DESCRIPTIONS, Format, failed

DEFAULT_TIMEOUT_S = 900.0
TRUST_FLAG = "--trust-pickled-module"


def grader_command(paths: list[Path], *, trust_pickled_module: bool = False, python: str | None = None) -> list[str]:
    """The child's command line (under `python`: the tool's own, or the run's when only it has
    torch, see `runner.grading.interpreter`); it prints one JSON line per path, in order."""
    argv = [python or sys.executable, "-m", "runner.grading.checkpoint_grade", *(str(p) for p in paths), "--json"]
    return argv + ([TRUST_FLAG] if trust_pickled_module else [])


def grader_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """No GPU for a grader (it must never take memory from training); the tool importable."""
    from runner.import_paths import tool_env

    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONUNBUFFERED"] = "1"
    return tool_env(env)


def read_answer(path: Path, stdout: str, stderr: str = "", rc: int | None = None) -> dict[str, Any]:
    """The answer for `path` in the child's output, or an unverified answer saying why none came."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # a hostile deep nesting is no answer either
            continue
        if isinstance(obj, dict) and "verified" in obj and obj.get("path") == str(path):
            return obj
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    return failed(str(path), f"the verifier exited {rc}: {tail[:300]}")


def verify_many(
    paths: list[str | Path],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    trust_pickled_module: bool = False,
    cwd: Path | None = None,
    python: str | None = None,
) -> list[dict[str, Any]]:
    """Grades several artifacts in one new interpreter (one torch import); any the child did not
    answer for (it crashed or timed out) is retried alone."""
    abs_paths = [Path(p).absolute() for p in paths]
    if not abs_paths:
        return []
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            grader_command(abs_paths, trust_pickled_module=trust_pickled_module, python=python),
            capture_output=True,
            text=True,
            timeout=timeout * len(abs_paths),
            env=grader_env(),
            stdin=subprocess.DEVNULL,
            cwd=cwd,
        )
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired:
        if len(abs_paths) == 1:
            return [failed(str(abs_paths[0]), f"verification took longer than {timeout:g} s")]
        out, err, rc = "", "", None
    answers = [read_answer(p, out, err, rc) for p in abs_paths]
    if len(abs_paths) > 1:
        answers = [
            a
            if "verifier exited" not in " ".join(a["problems"])
            else verify_many([p], timeout=timeout, trust_pickled_module=trust_pickled_module, cwd=cwd, python=python)[0]
            for a, p in zip(answers, abs_paths)
        ]
    for a in answers:
        a.setdefault("process_seconds", round(time.perf_counter() - t0, 4))
    return answers


def verify_in_subprocess(
    path: str | Path,
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    trust_pickled_module: bool = False,
    cwd: Path | None = None,
    python: str | None = None,
) -> dict[str, Any]:
    """Grades `path` in a new interpreter, no GPU visible."""
    return verify_many([path], timeout=timeout, trust_pickled_module=trust_pickled_module, cwd=cwd, python=python)[0]


def render_text(res: dict[str, Any]) -> str:
    head = "verified" if res["verified"] else "NOT verified"
    lines = [f"{res['path']}: {head} (grade {res['grade']})"]
    lines.append(f"  holds: {', '.join(res['holds']) or 'nothing usable'}")
    facts = []
    if res.get("step") is not None:
        facts.append(f"step {res['step']}")
    if res.get("bytes") is not None:
        facts.append(f"{res['bytes'] / 1e6:.1f} MB")
    if res.get("format"):
        try:
            facts.append(DESCRIPTIONS.get(Format(res["format"]), res["format"]))
        except ValueError:
            facts.append(str(res["format"]))
    if res.get("base_model") or res.get("base_revision"):
        facts.append(
            f"base model {res.get('base_model') or '?'} at revision {res.get('base_revision') or 'not recorded'}"
        )
    if res.get("verify_seconds") is not None:
        facts.append(f"checked in {res['verify_seconds']:.2f} s in a fresh process")
    if facts:
        lines.append("  " + ", ".join(facts))
    for p in res["problems"]:
        lines.append(f"  - {p}")
    return "\n".join(lines)
