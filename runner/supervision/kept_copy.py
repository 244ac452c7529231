"""A verified copy of the last good checkpoint of a script that saves in place.

Unmodified scripts such as nanoGPT rewrite one file (`out/ckpt.pt`) with a plain `torch.save`: a
kill during the save (a stop rule, an abort, the rental ending) truncates the only resume point.
For `checkpoint_glob` files the supervisor therefore grades a snapshot instead of the live file,
and keeps the snapshot that verified in `runs/<id>/checkpoints/kept/` (one at a time, so the cost
is one extra checkpoint on disk). On resume the runner puts it back when the original is missing
or no longer the version that verified; the original is moved aside, never deleted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from campaign_train.atomic import fsync_dir, read_json, write_json_atomic

KEPT_DIR = Path("checkpoints") / "kept"


def kept_dir(run_dir: Path) -> Path:
    return run_dir / KEPT_DIR


def _flat(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root)
    except ValueError:
        rel = Path(path.name)
    return "__".join(rel.parts)


def snapshot(path: Path, run_dir: Path, root: Path) -> tuple[Path, tuple[int, int]]:
    """Copy `path` to a candidate file beside the kept copy; returns it and the original's
    (size, mtime_ns) as it was copied (compared again at resume)."""
    folder = kept_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    st = path.stat()
    candidate = folder / (_flat(path, root) + ".candidate")
    with open(path, "rb") as src, open(candidate, "wb") as dst:
        shutil.copyfileobj(src, dst, 4 * 1024 * 1024)
        dst.flush()
        os.fsync(dst.fileno())
    return candidate, (st.st_size, st.st_mtime_ns)


def keep(candidate: Path, original: Path, sig: tuple[int, int], step: int | None, at: float) -> Path:
    """The candidate verified: it becomes the kept copy, replacing any older one."""
    folder = candidate.parent
    final = folder / candidate.name.removesuffix(".candidate")
    os.replace(candidate, final)
    write_json_atomic(
        folder / "kept.json",
        {"copy": str(final), "original": str(original), "size": sig[0], "mtime_ns": sig[1], "step": step, "at": at},
    )
    for other in folder.iterdir():
        if other != final and other.name != "kept.json" and not other.name.endswith(".candidate"):
            other.unlink(missing_ok=True)
    fsync_dir(folder)
    return final


def discard(candidate: Path) -> None:
    candidate.unlink(missing_ok=True)


def restore_if_needed(run_dir: Path) -> dict | None:
    """Before a resume: put the kept copy back when the original is missing or changed since it
    verified. Returns what was done (for the ledger), or None when the original is fine."""
    meta = read_json(kept_dir(run_dir) / "kept.json")
    if not isinstance(meta, dict):
        return None
    copy, original = Path(meta["copy"]), Path(meta["original"])
    if not copy.exists():
        return None
    try:
        st = original.stat()
        if (st.st_size, st.st_mtime_ns) == (meta.get("size"), meta.get("mtime_ns")):
            return None
    except FileNotFoundError:
        st = None
    aside = None
    if st is not None:
        aside = original.with_name(original.name + ".unverified")
        os.replace(original, aside)
    original.parent.mkdir(parents=True, exist_ok=True)
    tmp = original.with_name(original.name + ".restoring")
    shutil.copyfile(copy, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, original)
    fsync_dir(original.parent)
    return {
        "restored": str(original),
        "from": str(copy),
        "step": meta.get("step"),
        "moved_aside": str(aside) if aside else None,
    }
