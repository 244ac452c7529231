"""A verified copy of the newest good checkpoint of a script that saves on its own.

Unmodified scripts such as nanoGPT rewrite one file (`out/ckpt.pt`) with a plain `torch.save`: a
kill during the save (a stop rule, an abort, the rental ending) truncates the only resume point.
For `checkpoint_glob` matches (files, and folders such as the HF Trainer's `checkpoint-N/`) the
supervisor therefore grades a snapshot instead of the live artifact, under its own name (so the
grader sees `model.safetensors`, not a renamed copy), and keeps the snapshot of the newest step
that verified in `runs/<id>/checkpoints/kept/` (one at a time: the cost is one extra checkpoint
on disk). On resume the runner puts it back when the original is missing or no longer the
version that verified; the original is moved aside, never deleted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from campaign_train.atomic import fsync_dir, read_json, write_json_atomic

KEPT_DIR = Path("checkpoints") / "kept"
CANDIDATE = ".candidate"


def kept_dir(run_dir: Path) -> Path:
    return run_dir / KEPT_DIR


def signature(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) of a file; of a folder, the sum of its files' sizes and their newest mtime
    (a folder holds still when this does not change between two looks)."""
    if not path.is_dir():
        st = path.stat()
        return st.st_size, st.st_mtime_ns
    size, newest = 0, path.stat().st_mtime_ns
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            size += st.st_size
            newest = max(newest, st.st_mtime_ns)
    return size, newest


def _flat(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root)
    except ValueError:
        rel = Path(path.name)
    return "__".join(rel.parts)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):
            if p.is_file():
                with open(p, "rb+") as f:
                    os.fsync(f.fileno())
        return
    with open(src, "rb") as s, open(dst, "wb") as d:
        shutil.copyfileobj(s, d, 4 * 1024 * 1024)
        d.flush()
        os.fsync(d.fileno())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def snapshot(path: Path, run_dir: Path, root: Path) -> tuple[Path, tuple[int, int]]:
    """Copy `path` (file or folder) into a candidate folder beside the kept copy, under its own
    name; returns the copy and the original's signature as it was copied (compared at resume)."""
    holder = kept_dir(run_dir) / (_flat(path, root) + CANDIDATE)
    _remove(holder)
    holder.mkdir(parents=True)
    sig = signature(path)
    _copy(path, holder / path.name)
    return holder / path.name, sig


def kept_step(run_dir: Path) -> int | None:
    meta = read_json(kept_dir(run_dir) / "kept.json")
    step = meta.get("step") if isinstance(meta, dict) else None
    return step if isinstance(step, int) else None


def keep(candidate: Path, original: Path, sig: tuple[int, int], step: int | None, at: float) -> Path | None:
    """The candidate verified: it becomes the kept copy unless the kept one is of a later step
    (the newest verified step is kept, whatever order the gradings finished in). Returns the
    kept copy, or None when the candidate was discarded."""
    holder = candidate.parent
    folder = holder.parent
    current = kept_step(folder.parent.parent)
    if step is not None and current is not None and step < current:
        discard(candidate)
        return None
    final_holder = folder / holder.name.removesuffix(CANDIDATE)
    for other in folder.iterdir():
        if other != holder and other.name != "kept.json" and not other.name.endswith(CANDIDATE):
            _remove(other)
    os.replace(holder, final_holder)
    final = final_holder / candidate.name
    write_json_atomic(
        folder / "kept.json",
        {"copy": str(final), "original": str(original), "size": sig[0], "mtime_ns": sig[1], "step": step, "at": at},
    )
    fsync_dir(folder)
    return final


def discard(candidate: Path) -> None:
    holder = candidate.parent
    if holder.name.endswith(CANDIDATE):
        _remove(holder)
    else:
        _remove(candidate)


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
        if signature(original) == (meta.get("size"), meta.get("mtime_ns")):
            return None
        present = True
    except FileNotFoundError:
        present = False
    aside = None
    if present:
        aside = original.with_name(original.name + ".unverified")
        _remove(aside)
        os.replace(original, aside)
    original.parent.mkdir(parents=True, exist_ok=True)
    tmp = original.with_name(original.name + ".restoring")
    _remove(tmp)
    _copy(copy, tmp)
    os.replace(tmp, original)
    fsync_dir(original.parent)
    return {
        "restored": str(original),
        "from": str(copy),
        "step": meta.get("step"),
        "moved_aside": str(aside) if aside else None,
    }
