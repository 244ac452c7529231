"""Loading torch files safely and checking the parts they hold, with bounded memory.

Every load is `torch.load(weights_only=True)`, memory-mapped where the file is a zip archive, so a
many-GB checkpoint costs address space, not resident memory: pages a check has read are handed
back to the kernel (`madvise(MADV_DONTNEED)` on the private, clean mapping) as it goes.
The only objects beyond tensors and plain values ever allowed are the NumPy types a random-number
state holds (`numpy_rng_globals`), named one by one, never a blanket unpickle.
Imports: the stdlib and torch (NumPy only when a file holds NumPy state).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import mmap
from pathlib import Path
from typing import Any

from runner.grading.result import GradeResult, Part

CHUNK_ELEMENTS = 1 << 24  # elements checked per step (64 MB of float32)
_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    """Streamed: a fixed buffer whatever the size of the file."""
    h = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def numpy_rng_globals() -> list[Any]:
    """The NumPy names `np.random.get_state()` pickles into (the ndarray, its dtype): what HF's
    `rng_state.pth` and Accelerate's `random_states_*.pkl` hold. Empty when NumPy is missing."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load(path: Path, result: GradeResult, *, numpy_ok: bool = False, what: str | None = None) -> Any:
    """`torch.load(weights_only=True)`, mmap'd when possible; None (and a named problem) on failure."""
    import torch

    allow = numpy_rng_globals() if numpy_ok else []
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


def _release(start: int, length: int) -> None:
    """Give back the resident pages of a checked, memory-mapped range (Linux; best effort)."""
    lo = (start + _PAGE - 1) // _PAGE * _PAGE
    hi = (start + length) // _PAGE * _PAGE
    if hi > lo:
        try:
            ctypes.CDLL(None).madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_DONTNEED)
        except (AttributeError, OSError):
            pass


def _file_backed(addr: int) -> bool:
    """Whether `addr` lies in a mapping of a file (an mmap'd checkpoint), never anonymous memory:
    only such pages can be handed back and read again from the file."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                lo, _, hi = parts[0].partition("-")
                if int(lo, 16) <= addr < int(hi, 16):
                    return len(parts) == 6 and parts[5].startswith("/")
    except (OSError, ValueError, IndexError):
        pass
    return False


def all_finite(t: Any) -> bool:
    """Checked in chunks, each chunk's pages handed back once read: never a bool copy of a whole
    many-GB tensor, never the whole file resident."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    flat = t.reshape(-1)
    size = t.element_size()
    base = flat.data_ptr()
    mapped = flat.is_contiguous() and not flat.is_cuda and _file_backed(base)
    for i in range(0, flat.numel(), CHUNK_ELEMENTS):
        chunk = flat[i : i + CHUNK_ELEMENTS]
        finite = bool(chunk.isfinite().all())
        if mapped:
            _release(base + i * size, chunk.numel() * size)
        if not finite:
            return False
    return True


def check_model(sd: Any, result: GradeResult, where: str = "") -> bool:
    """Named tensors, all finite. Non-finite weights are a named problem (no use as a resume point)."""
    if not is_state_dict(sd):
        result.problem(f"{where}the model part is not a state dict of named tensors")
        return False
    bad = [name for name, t in sd.items() if not all_finite(t)]
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
