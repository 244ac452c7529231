"""safetensors files, recognised by content (an 8-byte header length, then a JSON header), and
sharded weights through their index (`*.safetensors.index.json`, `pytorch_model.bin.index.json`).

The header is read by hand (the format is a length and JSON, no package needed); every tensor must
lie inside the file with the size its shape and dtype give, and the data must be covered without
holes. Values are checked for NaN/inf in one sequential pass over the memory-mapped file
(`file_pass`), a chunk's pages handed back once checked, so a many-GB file costs a few tens of MB of
memory and about one read of the file.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from runner.grading import file_pass
from runner.grading import torch_files as tf
from runner.grading.result import Format, GradeResult, Part

# Bits per element of every dtype safetensors knows (0.4 to 0.8).
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
# dtypes whose values can be non-finite, as torch names them (missing ones are not value-checked)
_FLOAT_TORCH = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
}
MAX_HEADER = 100 << 20
INDEX_SUFFIX = ".index.json"


def is_safetensors(path: Path) -> bool:
    """By content: whatever the file is called (a kept copy is named `*.candidate`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
        size = path.stat().st_size
    except OSError:
        return False
    if len(head) < 9:
        return False
    n = struct.unpack("<Q", head[:8])[0]
    return 2 <= n <= min(size - 8, MAX_HEADER) and head[8:9] == b"{"


def read_header(path: Path, res: GradeResult) -> tuple[dict[str, Any], int] | None:
    """The header (tensor name -> dtype, shape, offsets) and where the data starts; checked."""
    name = path.name
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > MAX_HEADER:
                raise ValueError("header too long")
            header = json.loads(f.read(n))
        data_len = path.stat().st_size - 8 - n
        if not isinstance(header, dict):
            raise ValueError("header is not an object")
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
        res.problem(f"{name}: not a readable safetensors file ({type(exc).__name__}: {str(exc)[:120]})")
        return None
    spans = []
    tensors = {}
    for tname, meta in header.items():
        if tname == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = meta["dtype"], meta["shape"], meta["data_offsets"]
        except (KeyError, TypeError, ValueError):
            res.problem(f"{name}: tensor {tname!r} has a malformed header entry")
            return None
        if dtype not in DTYPE_BITS:
            res.problem(f"{name}: tensor {tname!r} has dtype {dtype!r}, which safetensors does not define")
            return None
        want = math.ceil(math.prod(shape) * DTYPE_BITS[dtype] / 8)
        if not 0 <= start <= end <= data_len:
            res.problem(f"{name}: tensor {tname!r} lies outside the file (truncated?)")
            return None
        if end - start != want:
            res.problem(
                f"{name}: tensor {tname!r} has the wrong size ({end - start} bytes; {dtype} {shape} needs {want})"
            )
            return None
        spans.append((start, end))
        tensors[tname] = meta
    covered = 0
    for start, end in sorted(spans):
        if start != covered:
            res.problem(f"{name}: the tensor data has a hole or overlap at byte {covered}")
            return None
        covered = end
    if covered != data_len:
        res.problem(f"{name}: {data_len - covered} bytes after the last tensor: the file does not match its header")
        return None
    return tensors, 8 + path.stat().st_size - 8 - data_len


def _nonfinite(path: Path, tensors: dict[str, Any], base: int) -> list[str]:
    """The float tensors holding NaN or inf, in header order: one sequential pass over the file."""
    import torch

    regions = []
    for tname, meta in tensors.items():
        tdtype = getattr(torch, _FLOAT_TORCH.get(meta["dtype"], ""), None)  # None: not value-checked
        if isinstance(tdtype, torch.dtype):
            start, end = meta["data_offsets"]
            regions.append(file_pass.Region(tname, base + start, end - start, tdtype))
    bad = set(file_pass.read_once(path, regions).nonfinite)
    return [t for t in tensors if t in bad]


def check_file(path: Path, res: GradeResult) -> dict[str, Any] | None:
    """Header, sizes and values of one safetensors file; its tensors, or None when unusable."""
    read = read_header(path, res)
    if read is None:
        return None
    tensors, base = read
    if not tensors:
        res.problem(f"{path.name}: holds no tensors")
        return None
    bad = _nonfinite(path, tensors, base)
    if bad:
        res.problem(
            f"{path.name}: the weights hold non-finite values (NaN or inf) in {len(bad)} tensor(s): {', '.join(bad[:5])}"
        )
    return tensors


def grade_file(path: Path, res: GradeResult) -> None:
    res.format = Format.SAFETENSORS
    tf.mark(res, Part.MODEL, check_file(path, res) is not None)


def check_index(index: Path, res: GradeResult) -> bool:
    """Every shard the index names is present, and holds every tensor the index puts in it."""
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError("empty weight_map")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        res.problem(f"{index.name}: not a readable shard index ({type(exc).__name__})")
        return False
    shards: dict[str, list[str]] = {}
    for tname, shard in weight_map.items():
        shards.setdefault(str(shard), []).append(tname)
    missing = [s for s in shards if not (index.parent / s).is_file()]
    if missing:
        res.problem(f"{index.name}: {len(missing)} of {len(shards)} shard(s) missing: {', '.join(sorted(missing)[:4])}")
        return False
    ok = True
    for shard, names in sorted(shards.items()):
        path = index.parent / shard
        if is_safetensors(path):
            have = check_file(path, res)
        else:
            sd = tf.load(path, res, what=shard)
            have = sd if sd is not None and tf.check_model(sd, res, f"{shard}: ") else None
        if have is None:
            ok = False
            continue
        absent = [n for n in names if n not in have]
        if absent:
            res.problem(f"{shard}: lacks {len(absent)} tensor(s) the index names: {', '.join(absent[:4])}")
            ok = False
    return ok


def grade_index(index: Path, res: GradeResult) -> None:
    res.format = Format.SHARDED_SAFETENSORS
    tf.mark(res, Part.MODEL, check_index(index, res))


def weight_files(folder: Path, stems: tuple[str, ...] = ("model", "pytorch_model")) -> list[Path]:
    """A model folder's weights: its index when sharded, else its single file(s)."""
    for stem in stems:
        for name in (f"{stem}.safetensors{INDEX_SUFFIX}", f"{stem}.bin{INDEX_SUFFIX}"):
            if (folder / name).is_file():
                return [folder / name]
    return [
        p for stem in stems for p in sorted(folder.glob(f"{stem}*.safetensors")) + sorted(folder.glob(f"{stem}*.bin"))
    ]


def check_weights(files: list[Path], res: GradeResult) -> bool:
    """Weights given as an index, safetensors files or torch .bin files."""
    ok = bool(files)
    for w in files:
        if w.name.endswith(INDEX_SUFFIX):
            ok = check_index(w, res) and ok
        elif is_safetensors(w):
            ok = check_file(w, res) is not None and ok
        else:
            sd = tf.load(w, res, what=w.name)
            ok = sd is not None and tf.check_model(sd, res, f"{w.name}: ") and ok
    return ok
