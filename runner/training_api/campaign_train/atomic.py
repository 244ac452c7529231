"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every file another process reads after a crash (supervisor.json, verdict.json, exit.json,
launch.json, run.toml, verify sidecars) goes through here: write a temp file in the same folder,
fsync it, rename it over the target, fsync the folder so the rename itself survives power loss.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(folder: str | Path) -> None:
    """Make a rename or a new file in `folder` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> Path:
    """Replace `path` with `data` atomically; `durable=False` skips the fsyncs (still atomic)."""
    path = Path(path)
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(folder)
    return path


def write_text_atomic(path: str | Path, text: str, **kw: Any) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"), **kw)


def write_json_atomic(path: str | Path, obj: Any, *, indent: int | None = 1, **kw: Any) -> Path:
    """JSON as Python writes it (NaN/Infinity tokens allowed: readers here accept them)."""
    text = json.dumps(obj, indent=indent, sort_keys=False, default=str) + "\n"
    return write_text_atomic(path, text, **kw)


def read_json(path: str | Path, default: Any = None) -> Any:
    """The JSON in `path`, or `default` when it is missing or unreadable (never raises)."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError, RecursionError):  # RecursionError: a file of 100,000 `[`
        return default
