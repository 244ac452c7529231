"""Loading torch files safely and checking the parts they hold, with bounded memory.

Every load is `torch.load(weights_only=True)`, memory-mapped where the file is a zip archive, so a
many-GB checkpoint costs address space, not resident memory; its tensors' values are checked in one
sequential pass over the file (`file_pass`), which hands each chunk's pages back as it goes.
The only objects beyond tensors and plain values ever allowed are the NumPy types a random-number
state holds (`numpy_rng_globals`) and DeepSpeed's bookkeeping records (`deepspeed_globals`, read into
inert stand-ins, DeepSpeed never imported), named one by one, never a blanket unpickle.
Imports: the stdlib and torch (NumPy only when a file holds NumPy state).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from runner.grading import file_pass
from runner.grading.result import GradeResult, Part


def numpy_rng_globals() -> list[Any]:
    """The NumPy names `np.random.get_state()` pickles into (the ndarray, its dtype): what HF's
    `rng_state.pth` and Accelerate's `random_states_*.pkl` hold. Empty when NumPy is missing."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


class DeepSpeedRecord:
    """What a DeepSpeed bookkeeping object in a ZeRO partition file is read into: its arguments and
    state kept as plain values, no code of DeepSpeed run (the grader needs the tensors beside them)."""

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


# the classes DeepSpeed pickles into `*_optim_states.pt` besides tensors and plain values
DEEPSPEED_RECORDS = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
)


def deepspeed_globals() -> list[Any]:
    """Each DeepSpeed record name mapped to the inert `DeepSpeedRecord` (torch's allowlist takes
    (object, name) pairs)."""
    return [(DeepSpeedRecord, name) for name in DEEPSPEED_RECORDS]


def load(
    path: Path, result: GradeResult, *, numpy_ok: bool = False, deepspeed_ok: bool = False, what: str | None = None
) -> Any:
    """`torch.load(weights_only=True)`, mmap'd when possible; None (and a named problem) on failure."""
    import torch

    allow = (numpy_rng_globals() if numpy_ok else []) + (deepspeed_globals() if deepspeed_ok else [])
    guard = torch.serialization.safe_globals(allow) if allow else contextlib.nullcontext()
    label = f"{what}: " if what else ""
    try:
        with guard:
            try:
                return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc) and "zipfile" not in str(exc):
                    raise
                return torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except Exception as exc:  # the reason is the result: reported, never swallowed
        result.problem(label + load_problem(path, exc))
        return None


def unsafe_globals(path: Path) -> list[str]:
    import torch

    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:
        return []


def load_problem(path: Path, exc: Exception) -> str:
    """Why a torch file did not load, in words that point the right way."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "Unsupported operand" in text or "invalid load key" in text:
        # torch words a file that is no pickle at all as a weights-only failure
        head = path.read_bytes()[:1] if path.is_file() else b""
        return "does not load: not a PyTorch checkpoint (neither a zip archive nor a pickle)" + (
            " (it looks like JSON text: the sidecar? name the .pt file)" if head in (b"{", b"[") else ""
        )
    if "Weights only load failed" in text:
        names = ", ".join(unsafe_globals(path))
        return (
            "does not load with torch.load(weights_only=True): it pickles objects other than "
            f"tensors and plain values{' (' + names + ')' if names else ''}"
        )
    return f"does not load: {type(exc).__name__}: {first[:300]}"


def is_state_dict(obj: Any) -> bool:
    import torch

    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) for k in obj)
        and all(isinstance(v, torch.Tensor) for v in obj.values())
    )


def check_model(sd: Any, result: GradeResult, where: str = "", nonfinite: list[str] | None = None) -> bool:
    """Named tensors, all finite. Non-finite weights are a named problem (no use as a resume point).
    `nonfinite`: what a pass over the file already found (`file_pass.scan_tensors`), else scanned here."""
    if not is_state_dict(sd):
        result.problem(f"{where}the model part is not a state dict of named tensors")
        return False
    bad = file_pass.scan_tensors(sd).nonfinite if nonfinite is None else nonfinite
    if bad:
        result.problem(
            f"{where}the weights hold non-finite values (NaN or inf) in {len(bad)} tensor(s): {', '.join(bad[:5])}"
        )
    return True


def check_optimizer(opt: Any, model: dict | None, result: GradeResult) -> bool:
    import torch

    if isinstance(opt, (list, tuple)) and opt and all(isinstance(o, dict) for o in opt):
        return all(check_optimizer(o, model, result) for o in opt)
    if not (isinstance(opt, dict) and "state" in opt and "param_groups" in opt):
        result.problem("the optimizer part lacks 'state' or 'param_groups'")
        return False
    groups = opt["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) and "params" in g for g in groups):
        result.problem("the optimizer's param_groups are malformed")
        return False
    ids = [p for g in groups for p in g["params"]]
    state = opt["state"]
    if not isinstance(state, dict):
        result.problem("the optimizer's state is not a mapping")
        return False
    stray = [k for k in state if k not in ids]
    if stray:
        result.problem(f"the optimizer's state refers to parameters {stray[:5]} that no param group holds")
        return False
    if model is not None:
        if len(ids) > len(model):
            result.problem(f"the optimizer has {len(ids)} parameters but the weights only {len(model)} tensors")
            return False
        shapes = {tuple(t.shape) for t in model.values()}
        for pid, st in state.items():
            for key, v in st.items() if isinstance(st, dict) else ():
                if isinstance(v, torch.Tensor) and v.dim() > 0 and tuple(v.shape) not in shapes:
                    result.problem(
                        f"optimizer state {key!r} of parameter {pid} has shape {tuple(v.shape)}, which no weight tensor has"
                    )
                    return False
    return True


def check_rng(rng: Any, result: GradeResult) -> bool:
    """The project's own RNG part: a torch uint8 state and Python's."""
    import torch

    if (
        not isinstance(rng, dict)
        or not isinstance(rng.get("torch"), torch.Tensor)
        or rng["torch"].dtype != torch.uint8
        or "python" not in rng
    ):
        result.problem("the RNG part lacks the torch (uint8 tensor) or Python state")
        return False
    return True


def check_file_rng(path: Path, result: GradeResult) -> bool:
    """An HF `rng_state*.pth` / Accelerate `random_states_*.pkl`: loads (NumPy state allowed by
    name) and holds a torch CPU generator state."""
    import torch

    state = load(path, result, numpy_ok=True, what=path.name)
    if state is None:
        return False
    cpu = state.get("cpu", state.get("torch_manual_seed")) if isinstance(state, dict) else None
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8:
        result.problem(f"{path.name}: holds no torch CPU random-number state")
        return False
    return True


def mark(result: GradeResult, part: Part, ok: bool) -> None:
    if ok:
        result.found.add(part)
