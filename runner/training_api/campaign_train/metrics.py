"""Metric reporting for training scripts: one call per step or eval, JSON lines in the run folder.

The supervisor judges a run only from what lands in `metrics.jsonl` (docs/INTERNALS.md, "Metric
lines"), so the writer is built for two things: being cheap enough to call every step (lines are
buffered in memory) and never leaving the supervisor blind for long (a daemon thread flushes the
buffer at least every `FLUSH_SECONDS`; events such as checkpoints are flushed at once). Only whole
lines are ever written, so a clean exit never leaves a partial last line; a line cut by SIGKILL is
closed with a newline before the next attempt appends.

Under the runner the folder comes from `CAMPAIGN_RUN_DIR`; outside it, `./campaign-run/`.
This module imports neither torch nor Textual: anything with `float()` is accepted as a value.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
LOCAL_RUN_DIR = "campaign-run"
FLUSH_SECONDS = 0.5


def run_dir() -> Path:
    """The run folder the runner gave this process, or `./campaign-run/` outside the runner."""
    env = os.environ.get("CAMPAIGN_RUN_DIR")
    path = Path(env) if env else Path.cwd() / LOCAL_RUN_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_id() -> str:
    return os.environ.get("CAMPAIGN_RUN_ID") or "local"


def attempt() -> int:
    try:
        return int(os.environ.get("CAMPAIGN_ATTEMPT", "1"))
    except ValueError:
        return 1


def _number(value: Any) -> int | float:
    """A metric value as a JSON number: ints stay ints, tensors and NumPy scalars become floats."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"metric value {value!r} is not a number") from None


class MetricWriter:
    """Buffered, thread-safe appender of JSON lines to one file.

    One per process (see `writer()`); a forked child (a DataLoader worker) drops its copy of the
    buffer and never writes, so lines are neither lost nor doubled.
    """

    def __init__(self, path: Path, flush_seconds: float = FLUSH_SECONDS) -> None:
        self.path = path
        self.flush_seconds = flush_seconds
        self._lock = threading.RLock()
        self._buf: list[str] = []
        self._pid = os.getpid()
        self._closed = False
        self._started = False
        self._ended = False
        self.end_status = "ok"
        self._failed = False
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._close_cut_line()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="metrics-flush", daemon=True)
        self._thread.start()

    def _close_cut_line(self) -> None:
        """A previous attempt killed mid-write may have left a line without its newline."""
        try:
            size = os.fstat(self._fd).st_size
            if size:
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        os.write(self._fd, b"\n")
        except OSError:
            pass

    # -- writing --------------------------------------------------------------------------------
    def write(self, obj: dict[str, Any], *, now: bool = False) -> None:
        if os.getpid() != self._pid:  # a forked child: its copy of the lock may be held
            return
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            if self._closed:
                return
            self._buf.append(line)
            if now:
                self.flush()

    def flush(self) -> None:
        if os.getpid() != self._pid:
            return
        with self._lock:
            if not self._buf or self._fd < 0:
                return
            data = "".join(self._buf).encode("utf-8")
            self._buf = []
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]

    def _flush_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_seconds)
            try:
                self.flush()
            except OSError as exc:  # disk full: say so once, keep training
                if not self._failed:
                    self._failed = True
                    print(f"campaign_train.metrics: cannot write {self.path}: {exc}", file=sys.stderr)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, resumed_from: str | None = None) -> None:
        if self._started:
            return
        self._started = True
        self.write(
            {
                "t": time.time(),
                "event": "start",
                "pid": os.getpid(),
                "attempt": attempt(),
                "resumed_from": resumed_from,
            },
            now=True,
        )

    def end(self, status: str | None = None) -> None:
        """Writes the end event once and closes the file (idempotent)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._closed:
                return
            if not self._ended:
                self._ended = True
                self._buf.append(
                    json.dumps(
                        {"t": time.time(), "event": "end", "status": status or self.end_status}, separators=(",", ":")
                    )
                    + "\n"
                )
            self.flush()
            self._closed = True
            os.close(self._fd)
            self._fd = -1
        self._wake.set()


_writer: MetricWriter | None = None
_writer_lock = threading.Lock()
_crashed = False


def writer() -> MetricWriter:
    """The process's writer, opened on first use (and its exit and SIGTERM hooks installed)."""
    global _writer
    if _writer is not None and _writer._pid == os.getpid():
        return _writer
    with _writer_lock:
        if _writer is None or _writer._pid != os.getpid():
            _writer = MetricWriter(run_dir() / METRICS_FILE)
            atexit.register(_at_exit)
            _install_hooks()
    return _writer


def start(resumed_from: str | os.PathLike | None = None) -> None:
    """Writes the start event (done on first use when the script does not call it first)."""
    writer().start(str(resumed_from) if resumed_from is not None else None)


def report(
    step: int, loss: Any = None, *, truncated: int | None = None, samples: int | None = None, **metrics: Any
) -> None:
    """Records one step or eval: `report(120, loss=2.31, dev_acc=0.61, truncated=3, samples=64)`.

    `truncated` and `samples` count inputs since the previous call. Non-finite values are kept
    (written as NaN/Infinity): they are exactly what the `nonfinite` rule looks for, so such a line
    is flushed at once instead of waiting for the buffer's next flush (the stop is milliseconds, not
    half a second, after the step that diverged).
    """
    w = writer()
    if not w._started:
        w.start(None)
    line: dict[str, Any] = {"t": time.time(), "step": int(step)}
    if loss is not None:
        line["loss"] = _number(loss)
    for name, value in metrics.items():
        if value is not None:
            line[name] = _number(value)
    if truncated is not None:
        line["truncated"] = int(truncated)
    if samples is not None:
        line["samples"] = int(samples)
    w.write(line, now=any(isinstance(v, float) and not math.isfinite(v) for v in line.values()))


def event(kind: str, **fields: Any) -> None:
    """An event line (`checkpoint`, ...), flushed at once so the supervisor sees it now."""
    w = writer()
    if not w._started:
        w.start(None)
    w.write({"t": time.time(), "event": kind, **fields}, now=True)


def flush() -> None:
    if _writer is not None:
        _writer.flush()


def mark_sigterm() -> None:
    """The run is ending because it was asked to: its end event will say "sigterm"."""
    writer().end_status = "sigterm"


def end(status: str | None = None) -> None:
    """Flushes and writes the end event now (also done at exit)."""
    if _writer is not None:
        _writer.end(status)


def _at_exit() -> None:
    w = _writer
    if w is None or w._pid != os.getpid():
        return
    if _crashed:
        w.flush()  # no end event: the run did not end cleanly, its exit status tells why
        return
    w.end()


def _install_hooks() -> None:
    """Flush on an uncaught exception and on SIGTERM when nobody else handles it."""
    previous_hook = sys.excepthook

    def hook(*args: Any) -> None:
        global _crashed
        _crashed = True
        flush()
        previous_hook(*args)

    sys.excepthook = hook
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def _on_sigterm(signum: int, frame: Any) -> None:
    """Default SIGTERM for scripts without a Checkpointer: flush, end event, die by the signal."""
    if _writer is not None:
        _writer.end("sigterm")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
