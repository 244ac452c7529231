"""Single torch files written by other programs: bare state_dicts, nanoGPT-like checkpoint dicts,
Lightning `.ckpt` files, and pickled `nn.Module`s (`torch.save(model)`).

Parts are found under the keys other programs use. A part counts only when it is truly there:
Lightning's `loops` key is progress bookkeeping, not a data position (resuming a plain DataLoader
from it replays other batches), so `data` is granted only for a stateful loader's saved state.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runner.grading import torch_files as tf
from runner.grading.result import FORMAT, Format, GradeResult, Part

MODEL_KEYS = (
    "model",
    "model_state_dict",
    "state_dict",
    "model_state",
    "net",
    "network",
    "module",
    "weights",
    "ema",
    "params",
)
OPTIMIZER_KEYS = (
    "optimizer",
    "optimizer_state_dict",
    "optim",
    "opt",
    "optimizer_state",
    "optimizers",
    "optimizer_states",
)
SCHEDULER_KEYS = (
    "scheduler",
    "lr_scheduler",
    "scheduler_state_dict",
    "sched",
    "lr_scheduler_state_dict",
    "lr_schedulers",
)
SCALER_KEYS = ("scaler", "grad_scaler", "scaler_state_dict", "amp", "amp_scaler")
PROGRESS_KEYS = ("step", "iter_num", "global_step", "iteration", "iter", "steps", "epoch", "num_updates")
RNG_KEYS = (
    "rng",
    "rng_state",
    "rng_states",
    "torch_rng_state",
    "random_state",
    "cpu_rng_state",
    "cuda_rng_state",
    "numpy_rng_state",
    "python_rng_state",
    "generator",
)
DATA_KEYS = (
    "data",
    "data_state",
    "sampler",
    "sampler_state",
    "dataloader",
    "dataloader_state",
    "data_position",
    "sample_index",
    "consumed_samples",
    "batch_idx",
    "data_iter",
    "shard_index",
)
LIGHTNING_MARKS = ("pytorch-lightning_version", "loops", "optimizer_states")

PICKLED_MODULE_FIX = (
    "save model.state_dict() instead (torch.save(model.state_dict(), path)), or set "
    "trust_pickled_module = true in the variant to have it reloaded by unpickling your training code"
)


def _find(d: dict, keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for k in keys:
        if k in d and d[k] is not None:
            return k, d[k]
    return None


def _step(value: Any) -> int | None:
    try:
        return int(value) if isinstance(value, (int, float)) or hasattr(value, "item") else None
    except (TypeError, ValueError, RuntimeError):
        return None


def _lightning_data(loops: Any) -> bool:
    """True when the fit loop saved a stateful loader's position (`combined_loader`)."""
    try:
        state = loops["fit_loop"]["state_dict"]
    except (KeyError, TypeError):
        return False
    combined = state.get("combined_loader") if isinstance(state, dict) else None
    return isinstance(combined, (list, tuple)) and any(bool(x) for x in combined)


def grade_dict_file(path: Path, res: GradeResult, trust_pickled_module: bool = False) -> Any:
    """Returns the loaded object (the dispatcher hands a campaign-format dict to its own grader)."""
    obj = tf.load(path, res)
    if obj is None:
        if _pickled_module(path):
            res.problems.clear()
            grade_pickled_module(path, res, trust_pickled_module)
        return None
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        return obj
    if tf.is_state_dict(obj):
        res.format = Format.STATE_DICT
        tf.mark(res, Part.MODEL, tf.check_model(obj, res))
        return obj
    if not isinstance(obj, dict):
        res.format = Format.UNKNOWN
        res.problem(f"holds a {type(obj).__name__}, not a state dict or a checkpoint dict")
        return obj
    lightning = any(k in obj for k in LIGHTNING_MARKS)
    res.format = Format.LIGHTNING if lightning else Format.DICT
    model = None
    model_hit = _find(obj, MODEL_KEYS)
    if model_hit and tf.check_model(model_hit[1], res):
        res.found.add(Part.MODEL)
        model = model_hit[1]
    hit = _find(obj, OPTIMIZER_KEYS)
    if hit:
        tf.mark(res, Part.OPTIMIZER, tf.check_optimizer(hit[1], model, res))
    for part, keys in ((Part.SCHEDULER, SCHEDULER_KEYS), (Part.SCALER, SCALER_KEYS)):
        hit = _find(obj, keys)
        tf.mark(res, part, hit is not None and hit[1] != [])
    hit = _find(obj, PROGRESS_KEYS)
    if hit is not None:
        res.found.add(Part.PROGRESS)
        res.step = _step(obj.get("global_step", hit[1]) if lightning else hit[1])
    tf.mark(res, Part.RNG, _find(obj, RNG_KEYS) is not None)
    tf.mark(res, Part.DATA, _find(obj, DATA_KEYS) is not None or (lightning and _lightning_data(obj.get("loops"))))
    if lightning and Part.DATA not in res.found:
        res.note(
            "holds no data position: Lightning restarts a plain DataLoader's epoch on resume "
            "(a loader with state_dict()/load_state_dict() is saved by Lightning)"
        )
    if model_hit is None:
        res.problem(f"no weights found under any known key (keys: {', '.join(map(str, list(obj)[:12]))})")
    return obj


def _pickled_module(path: Path) -> bool:
    """The file pickles a torch.nn module object (torch.save(model)), not a state dict."""
    names = tf.unsafe_globals(path)
    return any(n.startswith("torch.nn.modules.") or n.startswith("torch.nn.parameter.") for n in names)


def grade_pickled_module(path: Path, res: GradeResult, trust: bool) -> None:
    """Graded for what it is: reloadable only by unpickling the training code's classes."""
    res.format = Format.PICKLED_MODULE
    own = [n for n in tf.unsafe_globals(path) if not n.startswith("torch.")]
    classes = f" ({', '.join(own[:4])})" if own else ""
    if not trust:
        res.problem(
            f"a pickled nn.Module{classes}: it reloads only by unpickling trusted code, which "
            f"torch.load(weights_only=True) refuses; {PICKLED_MODULE_FIX}"
        )
        return
    import torch

    if any(n.startswith("__main__.") for n in own):
        res.problem(
            f"a pickled nn.Module whose class is defined in the training script itself{classes}: "
            "no other process can unpickle it; move the class into a module, or save model.state_dict()"
        )
        return
    for folder in (Path.cwd(), path.parent):  # where the training code's modules live
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)  # trusted by the variant's opt-in
    except Exception as exc:  # the reason is the result
        res.problem(f"does not unpickle (trust_pickled_module = true): {type(exc).__name__}: {str(exc)[:300]}")
        return
    if not isinstance(obj, torch.nn.Module):
        res.problem(f"holds a {type(obj).__name__}, not an nn.Module")
        return
    tf.mark(res, Part.MODEL, tf.check_model(obj.state_dict(), res))
    res.note("a pickled nn.Module, reloaded by unpickling trusted code (trust_pickled_module = true)")
