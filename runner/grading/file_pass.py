"""One sequential pass over a checkpoint file: its sha256 and the NaN/inf check of its tensors,
read from disk once.

Why: hashing a file, then loading it, then scanning its tensors reads a many-GB checkpoint two or
three times, and a NaN scan that builds a bool tensor per element ran at a fraction of the disk's
speed. Here the file is memory-mapped and walked front to back in `CHUNK_BYTES` steps: each chunk
is hashed (when asked) and the part of every tensor lying in it is checked, then its pages are
handed back (`MADV_DONTNEED`), so resident memory stays about one chunk whatever the file's size.
The next chunk is asked for ahead (`MADV_WILLNEED`), so the disk reads while the CPU checks.

A tensor is a `Region`: where its bytes lie in the file, and its dtype. Tensors loaded with
`torch.load(mmap=True)` are found in the file through the mapping they live in (`locate`).
Imports: the stdlib and torch.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHUNK_BYTES = 32 << 20  # a multiple of the page size: chunks are handed back page by page
CHUNK_ELEMENTS = 1 << 23  # elements checked per step of an in-memory tensor


@dataclass(frozen=True)
class Region:
    """One tensor's bytes in the file: `nbytes` from `start`, elements of `dtype` (a torch dtype)."""

    name: str
    start: int
    nbytes: int
    dtype: Any


@dataclass
class PassResult:
    sha256: str | None = None  # of the whole file, when asked for
    nonfinite: list[str] = field(default_factory=list)  # names holding NaN or inf
    bytes_read: int = 0


def finite(t: Any) -> bool:
    """All elements of a 1-D CPU tensor finite. The sum is tried first (fast, no per-element
    copy): NaN and inf propagate through any sum, so a finite sum proves every element finite; a
    non-finite sum (or an overflow) is settled element by element."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    try:
        if bool(t.sum().isfinite()):
            return True
    except (RuntimeError, NotImplementedError):  # dtypes without a sum kernel (float8 kinds)
        pass
    try:
        return bool(t.isfinite().all())
    except (RuntimeError, NotImplementedError):  # float8 kinds: checked widened
        return bool(t.float().isfinite().all())


def _mapped_files() -> list[tuple[int, int, int, str]]:
    """(start, end, file offset, path) of every file mapping of this process (/proc/self/maps)."""
    out = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.rstrip("\n").split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)"):
                    lo, _, hi = parts[0].partition("-")
                    out.append((int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5]))
    except (OSError, ValueError):
        pass
    return out


def locate(tensors: Mapping[str, Any]) -> tuple[dict[str, list[Region]], dict[str, Any]]:
    """The tensors of a `torch.load(mmap=True)` that lie, contiguous, in a file mapping, as
    regions of that file (by its real path); and the rest (in memory, strided), to check as they are."""
    maps = _mapped_files()
    by_file: dict[str, list[Region]] = {}
    rest: dict[str, Any] = {}
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        addr = t.data_ptr()
        hit = (
            next((m for m in maps if m[0] <= addr and addr + nbytes <= m[1]), None)
            if nbytes and t.device.type == "cpu" and t.is_contiguous()
            else None
        )
        if hit is None:
            rest[name] = t
        else:
            by_file.setdefault(hit[3], []).append(Region(str(name), addr - hit[0] + hit[2], nbytes, t.dtype))
    return by_file, rest


def scan_tensors(tensors: Mapping[str, Any], *, sha256_of: Path | None = None) -> PassResult:
    """The names of `tensors` holding NaN or inf (in their order): memory-mapped ones through one
    pass over each file, the others chunk by chunk; and the sha256 of `sha256_of`, taken in the
    same pass over that file."""
    by_file, rest = locate(tensors)
    res = PassResult()
    bad: set[str] = set()
    if sha256_of is not None:
        by_file.setdefault(os.path.realpath(sha256_of), [])
    for name, regions in by_file.items():
        want = sha256_of is not None and name == os.path.realpath(sha256_of)
        one = read_once(Path(name), regions, sha256=want)
        res.bytes_read += one.bytes_read
        bad.update(one.nonfinite)
        if want:
            res.sha256 = one.sha256
    bad.update(name for name, t in rest.items() if not all_finite(t))
    res.nonfinite = [str(n) for n in tensors if str(n) in bad]
    return res


def all_finite(t: Any) -> bool:
    """An in-memory (or strided) tensor, checked chunk by chunk: never a bool copy of all of it."""
    flat = t.reshape(-1)
    return all(finite(flat[i : i + CHUNK_ELEMENTS]) for i in range(0, flat.numel(), CHUNK_ELEMENTS))


def _check(view: memoryview, dtype: Any) -> bool:
    import torch

    return finite(torch.frombuffer(view, dtype=dtype))


class _Regions:
    """The regions met so far and how far each is checked (a region may span many chunks; an
    element cut by a chunk's end is checked with the next chunk)."""

    def __init__(self, regions: Iterable[Region]) -> None:
        import torch

        self.todo = sorted(
            (r for r in regions if r.nbytes and (r.dtype.is_floating_point or r.dtype.is_complex)),
            key=lambda r: r.start,
        )
        self.sizes = {r.dtype: torch.empty((), dtype=r.dtype).element_size() for r in self.todo}
        self.done = {r: r.start for r in self.todo}
        self.active: list[Region] = []
        self.next = 0
        self.bad: list[Region] = []

    def check_up_to(self, view: memoryview, c1: int) -> None:
        """Checks every region's whole elements that lie before byte `c1`."""
        while self.next < len(self.todo) and self.todo[self.next].start < c1:
            self.active.append(self.todo[self.next])
            self.next += 1
        for r in self.active:
            es, stop = self.sizes[r.dtype], r.start + r.nbytes
            end = min(stop, r.start + (c1 - r.start) // es * es)
            if end > self.done[r]:
                if not _check(view[self.done[r] : end], r.dtype):
                    self.bad.append(r)
                    end = stop  # one finding is enough: the rest is skipped
                self.done[r] = end
        self.active = [r for r in self.active if self.done[r] < r.start + r.nbytes]

    def nonfinite(self) -> list[str]:
        order = {r: i for i, r in enumerate(self.todo)}
        return list(dict.fromkeys(r.name for r in sorted(self.bad, key=order.__getitem__)))


def read_once(path: Path, regions: Iterable[Region], *, sha256: bool = False, chunk: int | None = None) -> PassResult:
    """Walks `path` once, front to back: the sha256 of all of it (when `sha256`) and the names of
    the float regions holding a NaN or an inf. Without `sha256`, only the span the regions cover
    is read. The hash runs in a second thread over the same mapped chunk (hashlib lets go of the
    GIL), beside the check: the chunk's pages are read from disk once for both."""
    chunk = chunk or CHUNK_BYTES
    regs = _Regions(regions)
    h = hashlib.sha256() if sha256 else None
    size = path.stat().st_size
    todo = regs.todo
    lo = 0 if h else (min(r.start for r in todo) // chunk * chunk if todo else size)
    hi = size if h else max((r.start + r.nbytes for r in todo), default=0)
    res = PassResult(sha256=h.hexdigest() if h and size == 0 else None)
    if hi <= lo:
        return res
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), lo, hi - lo, os.POSIX_FADV_SEQUENTIAL)
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private, never written: pages stay clean
    view = memoryview(m)
    hasher = ThreadPoolExecutor(1, thread_name_prefix="sha256") if h else None
    try:
        m.madvise(mmap.MADV_SEQUENTIAL)
        for c0 in range(lo, hi, chunk):
            c1 = min(c0 + chunk, hi)
            if c1 < hi:
                m.madvise(mmap.MADV_WILLNEED, c1, min(chunk, hi - c1))  # the disk reads on meanwhile
            hashed = hasher.submit(h.update, view[c0:c1]) if hasher and h else None
            regs.check_up_to(view, c1)
            if hashed is not None:
                hashed.result()
            m.madvise(mmap.MADV_DONTNEED, c0, c1 - c0)  # resident memory stays about one chunk
            res.bytes_read += c1 - c0
    finally:
        if hasher is not None:
            hasher.shutdown()
        try:
            view.release()
            m.close()
        except BufferError:  # a tensor of a failed check still holds the mapping: freed with it
            pass
    res.sha256 = h.hexdigest() if h else None
    res.nonfinite = regs.nonfinite()
    return res
