"""Checkpoints of distributed training: torch.distributed.checkpoint (FSDP) folders and DeepSpeed.

- DCP: the `.metadata` file names every tensor, its shards and where their bytes lie; every
  file it names must be there and long enough, and the tensors are loaded (one process, no
  process group) and checked. Top-level keys give the parts (`model`, `optimizer`/`optim`...).
- DeepSpeed: `latest` names a tag folder holding `mp_rank_*_model_states.pt` and, under ZeRO,
  `*zero_pp_rank_*_optim_states.pt` partitions. Under ZeRO-3 the module's tensors are empty
  placeholders: they are not weights, and the weights are only as good as every partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.grading import dicts
from runner.grading import torch_files as tf
from runner.grading.result import Format, GradeResult, Part


def is_dcp(folder: Path) -> bool:
    return (folder / ".metadata").is_file()


def grade_dcp(folder: Path, res: GradeResult) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    res.format = Format.DCP
    try:
        meta = dcp.FileSystemReader(str(folder)).read_metadata()
    except Exception as exc:  # the reason is the result
        res.problem(f".metadata: does not read: {type(exc).__name__}: {str(exc)[:200]}")
        return
    missing, short = set(), set()
    for info in (meta.storage_data or {}).values():
        path = folder / info.relative_path
        if not path.is_file():
            missing.add(info.relative_path)
        elif path.stat().st_size < info.offset + info.length:
            short.add(info.relative_path)
    if missing or short:
        if missing:
            res.problem(f"{len(missing)} file(s) the metadata names are missing: {', '.join(sorted(missing)[:4])}")
        if short:
            res.problem(
                f"{len(short)} file(s) are shorter than the metadata says (truncated): {', '.join(sorted(short)[:4])}"
            )
        return
    state: dict[str, Any] = {}
    for fqn, item in meta.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            state[fqn] = torch.empty(item.size, dtype=item.properties.dtype)
    try:
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder)), no_dist=True)
    except Exception as exc:  # the reason is the result
        res.problem(f"the tensors do not load: {type(exc).__name__}: {str(exc)[:200]}")
        return
    tops: dict[str, dict[str, Any]] = {}
    for fqn, t in state.items():
        top, _, rest = fqn.partition(".")
        tops.setdefault(top, {})[rest or top] = t
    keys = list(meta.state_dict_metadata)
    top_names = {k.partition(".")[0] for k in keys}
    model_key = next((k for k in dicts.MODEL_KEYS if k in top_names), None)
    if model_key is None and all("." in k for k in keys) and not top_names & set(dicts.OPTIMIZER_KEYS):
        model_key, tops = "model", {"model": state}  # a bare model state dict
    if model_key is None:
        res.problem(f"no model weights under any known key (top-level keys: {', '.join(sorted(top_names)[:8])})")
    else:
        tf.mark(res, Part.MODEL, tf.check_model(tops.get(model_key, {}), res))
    tf.mark(res, Part.OPTIMIZER, bool(top_names & set(dicts.OPTIMIZER_KEYS)))
    tf.mark(res, Part.SCHEDULER, bool(top_names & set(dicts.SCHEDULER_KEYS)))
    tf.mark(res, Part.PROGRESS, bool(top_names & set(dicts.PROGRESS_KEYS)))
    tf.mark(res, Part.RNG, bool(top_names & set(dicts.RNG_KEYS)))
    tf.mark(res, Part.DATA, bool(top_names & set(dicts.DATA_KEYS)))
    for key in dicts.PROGRESS_KEYS:
        t = state.get(key)
        if t is not None and t.numel() == 1:
            res.step = int(t.item())
            break


def is_deepspeed(path: Path) -> bool:
    if path.is_dir():
        return (
            (path / "latest").is_file()
            or any(path.glob("*mp_rank_*_model_states.pt"))
            or any(path.glob("global_step*/*model_states.pt"))
        )
    return path.name.endswith("_model_states.pt") and "mp_rank_" in path.name


def _placeholders(module: Any, shapes: Any) -> bool:
    """ZeRO-3 saves each partitioned parameter as an empty tensor; its true shape is in param_shapes."""
    if not tf.is_state_dict(module):
        return False
    empty = [k for k, t in module.items() if t.numel() == 0]
    return bool(empty) and (bool(shapes) or len(empty) == len(module))


def _model_states(path: Path, res: GradeResult) -> tuple[bool, int | None]:
    """(weights are real and intact, ZeRO partitions expected)"""
    obj = tf.load(path, res, what=path.name)
    if not isinstance(obj, dict):
        if obj is not None:
            res.problem(f"{path.name}: not a DeepSpeed model-states dict")
        return False, None
    step = obj.get("global_steps")
    if isinstance(step, int):
        res.step = step
        res.found.add(Part.PROGRESS)
    if obj.get("lr_scheduler"):
        res.found.add(Part.SCHEDULER)
    if isinstance(obj.get("optimizer"), dict) and obj["optimizer"].get("state"):
        res.found.add(Part.OPTIMIZER)  # without ZeRO the optimizer's state is saved with the module
    if obj.get("data_sampler"):
        res.found.add(Part.DATA)
    world = obj.get("dp_world_size") if isinstance(obj.get("dp_world_size"), int) else None
    if _placeholders(obj.get("module"), obj.get("param_shapes")):
        return False, world
    return tf.check_model(obj.get("module"), res, f"{path.name}: "), world


def _master_weights_finite(name: str, part: dict, res: GradeResult) -> None:
    """The fp32 master weights a ZeRO partition holds (`single_partition_of_fp32_groups` under
    ZeRO-1/2, `fp32_flat_groups` under ZeRO-3): a NaN there is a NaN in the weights a resume loads."""
    osd = part.get("optimizer_state_dict")
    groups = (
        (osd.get("fp32_flat_groups") or osd.get("single_partition_of_fp32_groups")) if isinstance(osd, dict) else None
    )
    if isinstance(groups, list):
        named = {f"group {i}": t for i, t in enumerate(groups)}
        tf.check_model(named, res, f"{name}: fp32 master weights: ")


def grade_deepspeed(path: Path, res: GradeResult) -> None:
    res.format = Format.DEEPSPEED
    folder = path
    if path.is_dir():
        latest = path / "latest"
        if latest.is_file():
            folder = path / latest.read_text(encoding="utf-8").strip()
            if not folder.is_dir():
                res.problem(f"'latest' names {folder.name}, which is not there")
                return
        elif not any(path.glob("*model_states.pt")):
            tags = sorted(path.glob("global_step*"), key=lambda p: int("".join(c for c in p.name if c.isdigit()) or 0))
            folder = tags[-1] if tags else path
        files = sorted(folder.glob("*mp_rank_*_model_states.pt"))
    else:
        files, folder = [path], path.parent
    if not files:
        res.problem("no mp_rank_*_model_states.pt found")
        return
    real, world = _model_states(files[0], res)
    shards = sorted(folder.glob("*zero_pp_rank_*_optim_states.pt"))
    if not real and not shards:
        res.problem(
            f"{files[0].name}: holds ZeRO-3 placeholder tensors, not weights; the weights are partitioned in "
            "the *zero_pp_rank_*_optim_states.pt files beside it (grade the folder, or consolidate with zero_to_fp32.py)"
        )
        return
    if shards:
        if world and len(shards) < world:
            res.problem(f"{len(shards)} of {world} ZeRO partition(s) present: the weights cannot be reassembled")
            return
        parts = [tf.load(s, res, deepspeed_ok=True, what=s.name) for s in shards]
        ok = all(isinstance(p, dict) for p in parts)
        for shard, part in zip(shards, parts, strict=True):
            if isinstance(part, dict):
                _master_weights_finite(shard.name, part, res)
        tf.mark(res, Part.OPTIMIZER, ok)
        # ZeRO-1/2 save the whole module beside the partitions; under ZeRO-3 the fp32 master
        # weights live only in the partitions
        tf.mark(res, Part.MODEL, real or ok)
    else:
        tf.mark(res, Part.MODEL, real)
