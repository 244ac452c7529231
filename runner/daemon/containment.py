"""Containment: no input of one run can stop the runner's loop or touch another run.

The runner's own log line can never raise (a full disk must not end the loop), and a failure while
watching, finishing or launching one run is confined to that run: written to `runner.log`, recorded
on the run as a `tick_error` event (once per distinct error, so a fault that repeats at every tick
does not grow the ledger), and retried at the next tick. Failures of the host (a full disk, a
ledger that cannot be written) leave the run as it is, to go on once the host recovers; failures of
the run's own input (an env key the OS refuses, a path too long) end that run as `failed`.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import traceback
from collections.abc import Callable

# errors of the host, not of the run: retried at the next tick, the run left as it is
HOST_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EROFS}
)


CANNOT_START = "cannot start: "  # a runner.log line `campaign up` reports as the reason (exit 2)
FATAL_MARKS = (CANNOT_START, "crashed:", "Fatal Python error")  # the runner died while starting


def log(msg: str) -> None:
    """One line to the runner's stderr (`runner.log`). Never raises: on ENOSPC, a closed or broken
    stderr, the line is lost and the runner goes on."""
    try:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} runner[{os.getpid()}]: {msg}\n"
        os.write(2, line.encode("utf-8", "replace"))
    except Exception:
        pass


def is_host_failure(exc: BaseException) -> bool:
    """A full disk, a ledger that cannot be written, too many open files: the host's trouble."""
    if isinstance(exc, sqlite3.OperationalError):
        return True
    return isinstance(exc, OSError) and exc.errno in HOST_ERRNOS


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


class Recorder:
    """Records a contained failure on its run, once per distinct (run, where, error)."""

    def __init__(self, record: Callable[..., object]) -> None:
        self._record = record  # Ledger.event
        self._seen: set[tuple[str | None, str, str]] = set()
        self.count = 0

    def contained(self, run_id: str | None, where: str, exc: BaseException) -> None:
        self.count += 1
        what = describe(exc)
        key = (run_id, where, what)
        if key in self._seen:
            return
        self._seen.add(key)
        log(f"contained a failure while {where} run {run_id}:\n" + traceback.format_exc())
        try:
            self._record("tick_error", run_id, where=where, error=what)
        except Exception:
            self._seen.discard(key)  # the ledger cannot be written now: record it when it can
