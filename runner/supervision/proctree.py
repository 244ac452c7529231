"""Process identity and process-tree stopping.

A pid alone is not an identity: after a process dies its pid is reused. Everything that records a
process for later (supervisor.json, the runner's re-adoption) keeps `(pid, create_time)` and checks
both before trusting or signalling it.

Stopping a run must leave nothing behind, including children that moved to another process group
or session (`setsid`) and double-forked daemons. Two things make that hold: the supervisor makes
itself a *child subreaper* (Linux `PR_SET_CHILD_SUBREAPER`), so orphaned descendants are reparented
to it instead of init and stay visible as its descendants; and `stop_tree` collects every
descendant with psutil *before* signalling, signals the run's process group and each collected
process, waits the grace period, collects again, SIGKILLs whatever is left, and confirms it gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import psutil

PR_SET_CHILD_SUBREAPER = 36
CREATE_TIME_TOLERANCE = 0.05  # psutil's create_time is derived from clock ticks


class Identity(NamedTuple):
    pid: int
    create_time: float


def identity_of(pid: int) -> Identity | None:
    """(pid, create_time) of a live process, or None when there is none."""
    try:
        return Identity(pid, psutil.Process(pid).create_time())
    except (psutil.Error, ValueError):
        return None


def is_alive(pid: int | None, create_time: float | None) -> bool:
    """True when `pid` runs and is the same process that started at `create_time` (not a zombie)."""
    if not pid or create_time is None:
        return False
    try:
        p = psutil.Process(int(pid))
        if abs(p.create_time() - float(create_time)) > CREATE_TIME_TOLERANCE:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError):
        return False


def process_of(pid: int | None, create_time: float | None) -> psutil.Process | None:
    """The psutil handle for a recorded identity, only when it is still that process."""
    if pid is None or not is_alive(pid, create_time):
        return None
    try:
        return psutil.Process(int(pid))
    except psutil.Error:
        return None


def catches_signal(pid: int, sig: int) -> bool | None:
    """Whether process `pid` has a handler for `sig` (Linux /proc SigCgt); None when unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        return None
    return None


def set_child_subreaper() -> bool:
    """Make orphaned descendants reparent to this process (Linux only); True when it took."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(pid: int, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Every live descendant of `pid` (children of children too), minus the `exclude` pids
    and their own descendants."""
    skip = set(exclude)
    out: list[psutil.Process] = []
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return out
    stack = [c for c in children if c.pid not in skip]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            stack.extend(c for c in p.children() if c.pid not in skip)
        except psutil.Error:
            pass
    return out


def group_members(pgid: int) -> list[psutil.Process]:
    """Processes whose process group is `pgid` (a scan of /proc: use sparingly)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


def gone(p: psutil.Process) -> bool:
    """Dead or a zombie (a zombie has freed everything but its exit status)."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def signal_group(pgid: int | None, sig: int) -> bool:
    """Signal a whole process group; False when the group no longer exists."""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_each(procs: Iterable[psutil.Process], sig: int) -> int:
    """Signal each process still running (psutil checks identity first); returns how many."""
    n = 0
    for p in procs:
        try:
            p.send_signal(sig)
            n += 1
        except psutil.Error:
            pass
    return n


@dataclass
class StopResult:
    term_at: float | None = None  # when SIGTERM went out (time.time())
    kill_at: float | None = None  # when SIGKILL went out, if it had to
    gone_at: float | None = None  # when every collected process was confirmed gone
    killed: int = 0  # processes that needed SIGKILL
    survivors: list[int] = field(default_factory=list)  # pids still there at the end (should be [])


def stop_tree(
    root_pid: int,
    pgid: int | None,
    grace: float,
    *,
    term: bool = True,
    exclude: Iterable[int] = (),
    tracked: Iterable[psutil.Process] = (),
    reap: Callable[[], None] | None = None,
    kill_timeout: float = 10.0,
    poll: float = 0.005,
) -> StopResult:
    """TERM the group and every descendant of `root_pid`, wait `grace`, KILL what is left.

    `root_pid` is the process whose descendants make up the run: the supervisor itself (their
    subreaper; it is not signalled), or the run's own process, checked by the caller with
    `process_of` (then it is signalled too: the runner cleaning up after a lost supervisor).
    `exclude` skips pids that are not part of the run (the verifier). `tracked`
    adds processes seen earlier. `reap` is called while waiting so zombies of our own children
    are collected by whoever owns their exit status.
    """
    res = StopResult()
    skip = set(exclude)
    procs: dict[int, psutil.Process] = {p.pid: p for p in tracked if p.pid not in skip}
    if root_pid != os.getpid():  # a run's own process (a lost supervisor's child) is part of it
        try:
            procs.setdefault(root_pid, psutil.Process(root_pid))
        except psutil.Error:
            pass
    for p in descendants(root_pid, skip):
        procs.setdefault(p.pid, p)
    if term:
        res.term_at = time.time()
        signal_group(pgid, signal.SIGTERM)
        signal_each([p for p in procs.values() if not _in_group(p, pgid)], signal.SIGTERM)
        if _wait_gone(procs, root_pid, skip, time.monotonic() + grace, reap, poll, signal.SIGTERM):
            res.gone_at = time.time()
            return res
    # collect again: new processes may have been started during the grace period
    for p in descendants(root_pid, skip):
        procs.setdefault(p.pid, p)
    left = [p for p in procs.values() if not gone(p)]
    res.kill_at = time.time()
    res.killed = len(left)
    signal_group(pgid, signal.SIGKILL)
    signal_each(left, signal.SIGKILL)
    deadline = time.monotonic() + kill_timeout
    while True:
        for p in descendants(root_pid, skip):  # a fork racing the kill
            if p.pid not in procs:
                procs[p.pid] = p
                signal_each([p], signal.SIGKILL)
        if _wait_gone(procs, root_pid, skip, time.monotonic() + 0.05, reap, poll, signal.SIGKILL):
            res.gone_at = time.time()
            return res
        if time.monotonic() > deadline:
            res.survivors = [p.pid for p in procs.values() if not gone(p)]
            return res


def stop_tracked(procs: list[psutil.Process], grace: float, kill_timeout: float = 10.0) -> list[int]:
    """SIGTERM each (identity-checked) process, SIGKILL what is left after `grace`; the pids that
    survived. For processes with no live root to walk from (a lost supervisor's run whose own
    process has already died)."""
    signal_each([p for p in procs if not gone(p)], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(not gone(p) for p in procs):
        time.sleep(0.05)
    left = [p for p in procs if not gone(p)]
    signal_each(left, signal.SIGKILL)
    deadline = time.monotonic() + kill_timeout
    while time.monotonic() < deadline and any(not gone(p) for p in left):
        time.sleep(0.05)
    return [p.pid for p in left if not gone(p)]


def _in_group(p: psutil.Process, pgid: int | None) -> bool:
    try:
        return pgid is not None and os.getpgid(p.pid) == pgid
    except OSError:
        return False


def _wait_gone(
    procs: dict[int, psutil.Process],
    root_pid: int,
    skip: set[int],
    deadline: float,
    reap: Callable[[], None] | None,
    poll: float,
    fresh_sig: int,
) -> bool:
    while True:
        if reap is not None:
            reap()
        if all(gone(p) for p in procs.values()):
            # nothing new either (a process reparented to us after the first collection)
            fresh = [p for p in descendants(root_pid, skip) if not gone(p) and p.pid not in procs]
            if not fresh:
                return True
            for p in fresh:
                procs[p.pid] = p
            signal_each(fresh, fresh_sig)
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
