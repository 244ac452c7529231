"""Following a run's `metrics.jsonl` as it grows, and parsing unmodified scripts' stdout.

`MetricStream` remembers its byte offset and hands back only complete lines: a last line without
its newline waits for it. Lines that do not parse as a JSON object are skipped and counted. A file
that shrinks (truncated) or is replaced (a new inode at the path) is read again from its start and
counted as a restart. Decoding is msgspec's newline-delimited decoder over the whole chunk (well
over a million lines a second); a chunk that fails is split in halves until the failing lines are
alone, and those go through the stdlib `json`, which accepts the `NaN`/`Infinity` tokens the
harness writes for non-finite values (msgspec refuses them).

`line_parsers.RegexMetrics` turns lines such as `iter 120: loss 2.31` into the same records through
the variant's `metrics_regex`.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from runner.supervision.line_parsers import LineParser

_DECODER = msgspec.json.Decoder(dict)  # typed: a line that is not an object fails the chunk
_DECODE_ERRORS = (msgspec.DecodeError, ValueError, UnicodeDecodeError, RecursionError)
DEFAULT_READ_BYTES = 8 * 1024 * 1024


def _decode_one_slow(line: bytes) -> Any:
    """One line through the stdlib: accepts NaN, Infinity, -Infinity (and 1e999 as inf)."""
    return json.loads(line)


def decode_lines(buf: bytes, end: int | None = None) -> tuple[list[dict], int]:
    """Decode complete newline-separated JSON lines; returns (objects, garbage line count).

    Blank lines are ignored. A line that is valid JSON but not an object counts as garbage. Lines
    holding a `NaN`/`Infinity` token are found with a byte search first and go straight to the
    stdlib, so they never make msgspec fail (and re-decode) a whole chunk.
    """
    out: list[dict] = []
    raw = bytes(buf)
    view = memoryview(raw)
    n = len(raw) if end is None else end
    garbage = 0
    start = 0
    nan_at = raw.find(b"NaN", 0, n)
    inf_at = raw.find(b"Infinity", 0, n)
    while start < n:
        if 0 <= nan_at < start:
            nan_at = raw.find(b"NaN", start, n)
        if 0 <= inf_at < start:
            inf_at = raw.find(b"Infinity", start, n)
        hits = [x for x in (nan_at, inf_at) if x >= 0]
        if not hits:
            garbage += _decode_range(raw, view, start, n, out)
            break
        at = min(hits)
        line_start = raw.rfind(b"\n", start, at) + 1 or start
        line_end = raw.find(b"\n", at, n)
        line_end = n if line_end < 0 else line_end + 1
        if line_start > start:
            garbage += _decode_range(raw, view, start, line_start, out)
        garbage += _decode_one_line(raw[line_start:line_end], out)
        start = line_end
    return out, garbage


def _decode_one_line(line: bytes, out: list[dict]) -> int:
    """One line through the stdlib; returns 1 when it is garbage."""
    line = line.strip()
    if not line:
        return 0
    try:
        item = _decode_one_slow(line)
    except _DECODE_ERRORS:
        return 1
    if type(item) is dict:
        out.append(item)
        return 0
    return 1


def _decode_range(raw: bytes, view: memoryview, start: int, end: int, out: list[dict]) -> int:
    try:
        out.extend(_DECODER.decode_lines(view[start:end]))
    except _DECODE_ERRORS:
        return _decode_split(raw, view, start, end, out)
    return 0


def _decode_split(raw: bytes, view: memoryview, start: int, end: int, out: list[dict]) -> int:
    """Bisect a range that failed until each bad line stands alone, then decode it slowly."""
    half = (start + end) // 2
    mid = raw.find(b"\n", half, end - 1)
    if mid < 0:
        mid = raw.rfind(b"\n", start, half)
    if mid < 0:  # a single line (possibly ending in its newline): the stdlib decides
        return _decode_one_line(raw[start:end], out)
    return _decode_range(raw, view, start, mid + 1, out) + _decode_range(raw, view, mid + 1, end, out)


def decode_lines_stdlib(buf: bytes, end: int | None = None) -> tuple[list[dict], int]:
    """The same job with the stdlib only: the reference the benchmark compares against."""
    out: list[dict] = []
    garbage = 0
    for line in (buf if end is None else buf[:end]).split(b"\n"):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except _DECODE_ERRORS:
            garbage += 1
            continue
        if type(item) is dict:
            out.append(item)
        else:
            garbage += 1
    return out, garbage


class MetricStream:
    """An incremental reader of one metrics file (JSON lines, or text through a `RegexMetrics`).

    `poll()` returns the records that became complete since the last call. Counters: `lines`
    (records returned), `garbage` (lines skipped), `restarts` (truncations and replacements),
    `offset` (bytes of the current file consumed, including a pending partial line).
    """

    def __init__(self, path: str | Path, *, regex: LineParser | None = None, start_offset: int = 0) -> None:
        self.path = Path(path)
        self.regex = regex
        self.lines = 0
        self.garbage = 0
        self.restarts = 0
        self.offset = 0
        self.behind = False  # True when the last poll stopped before the end of the file
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._pending = b""
        self._start_offset = start_offset  # bytes already judged before this reader (a new attempt)

    # -- file handling -------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False
        st = os.fstat(fd)
        self._fd, self._ino = fd, (st.st_dev, st.st_ino)
        self.offset = 0
        self._pending = b""
        if self._start_offset:
            self.offset = min(self._start_offset, st.st_size)
            self._start_offset = 0
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> MetricStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _replaced(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # gone for now: keep reading the open file
        return (st.st_dev, st.st_ino) != self._ino

    # -- reading -------------------------------------------------------------------------------
    def mark(self) -> tuple:
        """Where the reader stands; `rewind(mark)` goes back there (the records read since were
        not stored: a full disk must not lose them)."""
        return (self.offset, self._pending, self.lines, self.garbage, self.restarts, self._ino, self._fd)

    def rewind(self, mark: tuple) -> None:
        if mark[5] != self._ino or mark[6] != self._fd:
            return  # the file was replaced meanwhile: the new one is read from its start anyway
        self.offset, self._pending, self.lines, self.garbage, self.restarts = mark[:5]

    def poll(self, max_bytes: int = DEFAULT_READ_BYTES) -> list[dict]:
        """New complete records (at most about `max_bytes` of file read per call)."""
        if self._fd is None:
            self._open()
        fd = self._fd
        if fd is None:  # the file does not exist yet
            return []
        size = os.fstat(fd).st_size
        if size < self.offset:  # truncated in place: the writer started over
            self.restarts += 1
            self.offset = 0
            self._pending = b""
        records = self._read(size, max_bytes)
        if not self.behind and self._replaced():
            # the old file is drained; a new one took its place: follow it from its start
            self.close()
            self._pending = b""
            if self._open() and self._fd is not None:
                self.restarts += 1
                records.extend(self._read(os.fstat(self._fd).st_size, max_bytes))
        return records

    def iter_batches(self, max_bytes: int = DEFAULT_READ_BYTES) -> Iterator[list[dict]]:
        """Catch up to the current end of the file, one bounded batch at a time."""
        while True:
            batch = self.poll(max_bytes)
            if batch:
                yield batch
            if not self.behind:
                return

    def _read(self, size: int, max_bytes: int) -> list[dict]:
        """Read up to `size` (what fstat says is there: no oversized buffer is allocated)."""
        n = min(max_bytes, size - self.offset)
        self.behind = size - self.offset > max_bytes
        if n <= 0 or self._fd is None:
            return []
        data = os.pread(self._fd, n, self.offset)
        if not data:
            return []
        self.offset += len(data)
        if self._pending:
            data = self._pending + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._pending = data
            return []
        self._pending = data[cut + 1 :]
        if self.regex is not None:
            out, bad = self.regex.parse_block(data[: cut + 1])
        else:
            out, bad = decode_lines(data, cut + 1)
        self.lines += len(out)
        self.garbage += bad
        return out


# ---------------------------------------------------------------------------------------------
# Waking up the moment the file grows (Linux inotify through ctypes; None elsewhere)

_IN_MODIFY, _IN_ATTRIB, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x4, 0x80, 0x100
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (+ name)


class FileWatch:
    """A readable fd that becomes ready when `path` is written, created, or replaced.

    Watches the file (writes) and its folder (the file created or renamed into place), so the
    reader never needs a timer to notice new lines. `open_watch()` returns None where inotify is
    unavailable: callers then poll.
    """

    def __init__(self, fd: int, libc: ctypes.CDLL, path: Path) -> None:
        self._fd = fd
        self._libc = libc
        self.path = path
        self._file_ino: tuple[int, int] | None = None
        self._dir_wd = self._add(path.parent, _IN_CREATE | _IN_MOVED_TO)
        self.rewatch()

    @classmethod
    def open_watch(cls, path: str | Path) -> FileWatch | None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        try:
            return cls(fd, libc, Path(path))
        except OSError:
            os.close(fd)
            return None

    def _add(self, path: Path, mask: int) -> int:
        """The watch descriptor (> 0), or 0 when `path` does not exist (yet)."""
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err == errno.ENOENT:
                return 0
            raise OSError(err, os.strerror(err), str(path))
        return wd

    def rewatch(self) -> None:
        """Watch the file now at `path` (after it appeared or was replaced)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        ino = (st.st_dev, st.st_ino)
        if ino != self._file_ino and self._add(self.path, _IN_MODIFY | _IN_ATTRIB | _IN_DELETE_SELF | _IN_MOVE_SELF):
            self._file_ino = ino

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> None:
        """Consume pending events. Their details hardly matter (the reader re-reads the file):
        only an event on the folder (a file created or renamed in) means the file may be new."""
        try:
            data = os.read(self._fd, 65536)  # level-triggered: anything left wakes us again
        except BlockingIOError:
            return
        pos, folder_event = 0, False
        while pos + 16 <= len(data):
            wd, _mask, _cookie, length = _EVENT.unpack_from(data, pos)
            folder_event |= wd == self._dir_wd
            pos += 16 + length
        if folder_event or self._file_ino is None:
            self.rewatch()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
