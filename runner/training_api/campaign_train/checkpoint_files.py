"""Finding checkpoints on disk: the `ckpt-<step>.pt` files, their sidecars and verify records.

Apart from `checkpoint` because it needs only the standard library: resuming picks the newest
good one with it, and pruning decides what to keep with it, without the saving machinery.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from campaign_train.atomic import write_json_atomic as _write_json_atomic
from campaign_train.formats import sidecar_path, verify_record_paths


def write_json_atomic(path: Path, obj: Any) -> None:
    """A sidecar, atomically (campaign_train.atomic: temp file, fsync, rename, fsync the folder)."""
    _write_json_atomic(path, obj)


def read_verify_record(ckpt: Path) -> dict | None:
    for p in verify_record_paths(ckpt):
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return None


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of every `ckpt-<step>.pt` in `directory`, oldest first."""
    out = []
    for p in directory.glob("ckpt-*.pt"):
        try:
            out.append((int(p.stem.split("-", 1)[1]), p))
        except ValueError:
            continue
    return sorted(out)


def latest_checkpoint(directory: Path) -> Path | None:
    """The newest complete checkpoint (sidecar present, size matching) not verified as bad."""
    for _step, p in reversed(list_checkpoints(directory)):
        try:
            meta = json.loads(sidecar_path(p).read_text(encoding="utf-8"))
            if meta.get("bytes") != p.stat().st_size:
                continue
        except (OSError, ValueError):
            continue
        record = read_verify_record(p)
        if record is not None and record.get("verified") is False:
            continue
        return p
    return None
