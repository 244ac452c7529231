"""The on-disk names and formats every side agrees on, with no dependency beyond the standard
library: the training process writes them, the supervisor, the grader, `verify` and the console
read them.

A checkpoint is `checkpoints/ckpt-<step:09d>.pt` (or `final.pt`) in the format `FORMAT`, with a
JSON sidecar beside it; the supervisor's verdict on it is `<name>.verify.json` (docs/INTERNALS.md).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

FORMAT = "campaign-checkpoint/1"  # the "format" key of a checkpoint and of its sidecar
CHECKPOINT_DIR = "checkpoints"
FINAL_NAME = "final"
VERIFY_SUFFIX = ".verify.json"


def checkpoint_name(step: int) -> str:
    return f"ckpt-{int(step):09d}"


def sidecar_path(ckpt: Path) -> Path:
    return ckpt.with_suffix(".json")


def verify_path_for(ckpt: Path) -> Path:
    """Where the supervisor writes its verdict on `ckpt`: `ckpt-N.verify.json` beside it."""
    return ckpt.with_name(ckpt.stem + VERIFY_SUFFIX)


def verify_record_paths(ckpt: Path) -> tuple[Path, Path]:
    """Where a verdict on `ckpt` may be: `ckpt-N.verify.json`, or `ckpt-N.pt.verify.json` as
    earlier versions wrote it."""
    return verify_path_for(ckpt), ckpt.with_name(ckpt.name + VERIFY_SUFFIX)


_hashes: dict[tuple[str, int, int, int], str] = {}


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read 1 MiB at a time; remembered per (path, size, mtime, inode)
    within this process, so a file checked before and after a copy is read once."""
    path = Path(path)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    digest = _hashes.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digest = _hashes[key] = h.hexdigest()
    return digest
