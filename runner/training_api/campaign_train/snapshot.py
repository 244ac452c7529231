"""A consistent host copy of the training state, so serialisation can leave the training thread.

Apart from `checkpoint` because it is the memory side of a save: whether a second host copy fits,
and how to make one that keeps tied weights tied.
"""

from __future__ import annotations

from typing import Any

import torch


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _room_for_copy(state: dict[str, Any]) -> bool:
    """A second host copy must fit with room to spare; otherwise serialise in the loop (slower)."""
    try:
        import psutil

        return _tensor_bytes(state) * 1.5 < psutil.virtual_memory().available
    except Exception:
        return False


def snapshot(obj: Any, _memo: dict | None = None) -> Any:
    """A deep copy whose tensors are detached CPU copies (GPU tensors are copied to the host).

    Containers keep their type and attributes (a module state dict's `_metadata`); tensors that
    were the same view of the same memory stay one tensor in the copy (tied weights stay tied).
    """
    memo: dict = {} if _memo is None else _memo
    if isinstance(obj, torch.Tensor):
        key = (
            (
                obj.untyped_storage().data_ptr(),
                obj.storage_offset(),
                tuple(obj.shape),
                obj.stride(),
                obj.dtype,
                str(obj.device),
            )
            if obj.numel()
            else None
        )
        if key is not None and key in memo:
            return memo[key]
        out = obj.detach().to("cpu", copy=True)
        if key is not None:
            memo[key] = out
        return out
    if isinstance(obj, dict):
        copied = type(obj)()
        for k, v in obj.items():
            copied[k] = snapshot(v, memo)
        attrs = getattr(obj, "__dict__", None)
        if attrs:
            copied.__dict__.update({k: snapshot(v, memo) for k, v in attrs.items()})
        return copied
    if isinstance(obj, list):
        return [snapshot(v, memo) for v in obj]
    if isinstance(obj, tuple):
        return tuple(snapshot(v, memo) for v in obj)
    return obj
