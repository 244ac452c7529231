"""Grade a checkpoint from what it holds, in a fresh interpreter: is it a resume point?

A file that exists but does not reload is not verified output, and only a new process proves a
reload. So the supervisor, `campaign verify` and `campaign checkpoint` all grade through
`runner.grading.client` (`grader_command` + `read_answer`, or `verify_many`, which wraps both):
`python -m runner.grading.checkpoint_grade PATH... --json`, one JSON object per path: the
`checkpoint --json` keys (`verified`, `grade`, `holds`, `problems`) plus `path`, `format`, `step`,
`bytes`, `verify_seconds` (and `base_model`/`base_revision` for adapters).

The format is recognised from content, never from a name alone, and graded by its own module:
`own_format` (campaign_train's files), `dicts` (state_dicts, checkpoint dicts, Lightning, pickled
modules), `safetensors_format` (single and sharded), `hf_folders` (Trainer, Accelerate, PEFT),
`distributed` (FSDP/DCP, DeepSpeed). The grader needs only the stdlib and torch (NumPy when a file
holds NumPy random state), so it can run under a training run's own interpreter.

Grades: `full` (weights, optimizer, progress, RNG states, data position, and scheduler and scaler
where the run has them), `weights+optimizer`, `weights`, `unreadable`. `verified` means the
artifact loads and its weights are intact; what it lacks for an exact resume is named in `problems`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from runner.grading import dicts, distributed, hf_folders, own_format
from runner.grading import safetensors_format as st
from runner.grading.client import TRUST_FLAG, render_text, verify_in_subprocess
from runner.grading.result import Format, GradeResult, failed

__all__ = ["grade_path", "main", "render_text", "verify_in_subprocess"]


def _grade_folder(path: Path, res: GradeResult) -> None:
    if distributed.is_dcp(path):
        return distributed.grade_dcp(path, res)
    if distributed.is_deepspeed(path):
        return distributed.grade_deepspeed(path, res)
    kind = hf_folders.kind(path)
    if kind is not None:
        return hf_folders.GRADERS[kind](path, res)
    res.format = Format.UNKNOWN
    names = sorted(p.name for p in path.iterdir())[:10]
    res.problem(
        "the folder holds no checkpoint layout I recognise (Hugging Face, Accelerate, PEFT, "
        f"torch.distributed.checkpoint, DeepSpeed); it holds: {', '.join(names) or 'nothing'}"
    )


def _grade_file(path: Path, res: GradeResult, trust_pickled_module: bool) -> None:
    size = path.stat().st_size
    res.bytes = size
    sidecar = own_format.read_sidecar(path)
    if size == 0:
        res.problem("the file is empty (0 bytes)")
        res.format = Format.CAMPAIGN if sidecar is not None else None
    elif sidecar is not None:
        own_format.grade_own(path, sidecar, res)
    elif path.name.endswith(st.INDEX_SUFFIX):
        st.grade_index(path, res)
    elif st.is_safetensors(path):
        st.grade_file(path, res)
    elif distributed.is_deepspeed(path):
        distributed.grade_deepspeed(path, res)
    else:
        obj = dicts.grade_dict_file(path, res, trust_pickled_module)
        if isinstance(obj, dict) and obj.get("format") == own_format.FORMAT:
            res.found.clear()
            own_format.grade_own(path, None, res, obj)


def grade_path(path: str | Path, *, trust_pickled_module: bool = False) -> dict[str, Any]:
    """Grades `path` in this process (the caller should be a fresh interpreter: see the module doc)."""
    import torch  # noqa: F401  (imported before the clock starts: verify_seconds is the check itself)

    t0 = time.perf_counter()
    path = Path(path).absolute()
    res = GradeResult(path=str(path))
    if path.is_dir():
        _grade_folder(path, res)
    elif not path.exists():
        res.problem("does not exist")
    else:
        _grade_file(path, res, trust_pickled_module)
    if path.exists():
        res.finish()
    res.verify_seconds = round(time.perf_counter() - t0, 4)
    return res.to_json()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m runner.grading.checkpoint_grade",
        description="Load checkpoints in this (fresh) process and grade what they hold.",
    )
    ap.add_argument("paths", nargs="+", metavar="path")
    ap.add_argument("--json", action="store_true", help="one JSON object per path, one per line")
    ap.add_argument(TRUST_FLAG, action="store_true", help="reload pickled nn.Modules by unpickling (trusted code only)")
    ns = ap.parse_args(argv)
    worst = 0
    for p in ns.paths:
        try:
            res = grade_path(p, trust_pickled_module=ns.trust_pickled_module)
        except Exception as exc:  # one artifact's crash must not hide the others' answers
            res = failed(str(Path(p).absolute()), f"the grader failed: {type(exc).__name__}: {str(exc)[:300]}")
        print(json.dumps(res, default=str) if ns.json else render_text(res), flush=True)
        code = 2 if not Path(p).exists() else (0 if res["verified"] else 1)
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
