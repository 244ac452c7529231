"""The project's own files (`campaign_train.checkpoint`): a `campaign-checkpoint/1` sidecar beside them.

Size and sha256 must match the sidecar, the file must load with weights_only (memory-mapped), and every
part the sidecar lists must be there and make sense. The sha256 and the weights' NaN/inf check come
from one sequential pass over the file (`file_pass`): a many-GB checkpoint is read from disk once.
A data position that never moved over many steps is named: a loader whose position is not recorded
resumes from the wrong batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.grading import file_pass
from runner.grading import torch_files as tf
from runner.grading.result import FORMAT, Format, GradeResult, Part

STILL_DATA_STEPS = 50  # a step this far in with the data position still at 0 is named


def read_sidecar(path: Path) -> dict | None:
    side = path.with_suffix(".json")
    if side == path:
        return None
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _data_never_moved(value: Any, step: int | None) -> bool:
    """True when the data part says it consumed nothing although the run is many steps in."""
    if not isinstance(value, dict) or step is None or step < STILL_DATA_STEPS:
        return False
    for key in ("consumed", "position", "index", "sample_index", "batches"):
        v = value.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v == 0
    sampler = value.get("sampler")
    return _data_never_moved(sampler, step) if isinstance(sampler, dict) else False


def grade_own(path: Path, sidecar: dict | None, res: GradeResult, state: Any = None) -> None:
    """`sidecar` None: the file is ours (its format key says so) but the save never completed."""
    res.format = Format.CAMPAIGN
    size = path.stat().st_size
    check_sha = False
    if sidecar is None:
        res.problem("its sidecar is missing: the save did not complete")
        sidecar = {"holds": state.get("holds"), "step": (state.get("progress") or {}).get("step")}
    elif sidecar.get("bytes") != size:
        res.problem(f"the file has {size} bytes, its sidecar says {sidecar.get('bytes')}: truncated or rewritten")
    else:
        check_sha = True
    loading = GradeResult(path=res.path)  # its problems follow the sha256's, as the checks read
    if state is None:
        state = tf.load(path, loading)  # mmap'd: the tensors' bytes are read by the pass below
    model = state.get("model") if isinstance(state, dict) and state.get("format") == FORMAT else None
    # one pass over the file: the sha256 and the weights' NaN/inf check from the same reads
    scan = file_pass.scan_tensors(
        model if isinstance(model, dict) and tf.is_state_dict(model) else {}, sha256_of=path if check_sha else None
    )
    if check_sha and sidecar.get("sha256") != scan.sha256:
        res.problem("its sha256 does not match the sidecar: the file changed after it was written")
    for text in loading.problems:
        res.problem(text)
    if state is None:
        return
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        res.problem(f"the file is not a {FORMAT} checkpoint, although its sidecar says so")
        return
    listed = [p for p in sidecar.get("holds") or [] if p in {x.value for x in Part}]
    res.expected = {Part(p) for p in listed if p in ("scheduler", "scaler")}
    for name in listed:
        part = Part(name)
        if name not in state:
            res.problem(f"the sidecar lists {name!r} but the file does not hold it")
            continue
        value = state[name]
        if part is Part.MODEL:
            ok = tf.check_model(value, res, nonfinite=scan.nonfinite if value is model else None)
        elif part is Part.OPTIMIZER:
            model = state.get("model") if tf.is_state_dict(state.get("model")) else None
            ok = tf.check_optimizer(value, model, res)
        elif part is Part.PROGRESS:
            step = value.get("step") if isinstance(value, dict) else None
            ok = isinstance(step, int) and step >= 0
            if not ok:
                res.problem("the progress part holds no step")
            elif sidecar.get("step") != step:
                res.problem(f"the file is at step {step}, its sidecar says {sidecar.get('step')}")
                ok = False
            res.step = step
        elif part is Part.RNG:
            ok = tf.check_rng(value, res)
        elif part in (Part.SCHEDULER, Part.SCALER):
            ok = isinstance(value, dict)
            if not ok:
                res.problem(f"the {name} part is not a state dict")
        else:  # data
            ok = value is not None
        tf.mark(res, part, ok)
    if Part.DATA in res.found and _data_never_moved(state.get("data"), res.step):
        res.found.discard(Part.DATA)
        res.note(
            f"the data position is still 0 at step {res.step}: the loader's position was never recorded, "
            "so a resume would replay the first batches (use campaign_train's resumable loader, or save its position)"
        )
