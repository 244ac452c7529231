"""The run's processes as its supervisor keeps them: `tree.json`, the stop, orphans reaped.

Apart from the supervisor's loop because it is one job with its own state (the processes seen,
when SIGTERM and SIGKILL went out): the loop only says when to act.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from campaign_train.atomic import write_json_atomic
from runner.supervision import proctree

TREE_SECONDS = 1.0  # how often the run's process list (tree.json) is brought up to date


class RunTree:
    """The training process's tree under this supervisor (its verifiers, `exclude`, left out)."""

    def __init__(
        self,
        run_dir: Path,
        attempt: int,
        grace: float,
        exclude: Callable[[], Iterable[int]],
        log_line: Callable[[str], None],
    ) -> None:
        self.run_dir = run_dir
        self.attempt = attempt
        self.grace = grace
        self.exclude = exclude
        self.log_line = log_line
        self.tree: dict[int, psutil.Process] = {}
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.kill_deadline: float | None = None
        self._tree_at = 0.0
        self._tree_seen: frozenset = frozenset()

    def record(self) -> None:
        """`tree.json`: the run's processes (pid, start time) as last seen, at most once a second.
        Should this supervisor be lost, the runner stops every one still alive — setsid'd
        grandchildren too, and those of a training process already dead of the broken pipe
        (metrics_regex) — not only the training process's own group."""
        now = time.monotonic()
        if now - self._tree_at < TREE_SECONDS:
            return
        self._tree_at = now
        seen = []
        for p in proctree.descendants(os.getpid(), self.exclude()):
            try:
                seen.append((p.pid, p.create_time()))
            except psutil.Error:
                continue
        key = frozenset(seen)
        if key == self._tree_seen:
            return
        self._tree_seen = key
        try:
            write_json_atomic(
                self.run_dir / "tree.json",
                {"attempt": self.attempt, "at": time.time(), "processes": sorted(seen)},
                durable=False,
            )
        except OSError:
            pass  # a full disk: the last list stands

    def begin_stop(self, pgid: int) -> None:
        """SIGTERM the group (and any descendant that left it), then SIGKILL after the grace."""
        self.term_at = time.time()
        proctree.signal_group(pgid, signal.SIGTERM)
        self.kill_deadline = time.monotonic() + self.grace
        for p in proctree.descendants(os.getpid(), self.exclude()):
            self.tree.setdefault(p.pid, p)
            try:
                if os.getpgid(p.pid) != pgid:
                    p.send_signal(signal.SIGTERM)
            except (OSError, psutil.Error):
                pass

    def kill_due(self) -> bool:
        """The grace after the SIGTERM is over and no SIGKILL went out yet."""
        return self.kill_deadline is not None and self.kill_at is None and time.monotonic() >= self.kill_deadline

    def kill_now(self, pgid: int) -> None:
        self.kill_at = time.time()
        proctree.signal_group(pgid, signal.SIGKILL)
        for p in proctree.descendants(os.getpid(), self.exclude()):
            self.tree.setdefault(p.pid, p)
        proctree.signal_each([p for p in self.tree.values() if not proctree.gone(p)], signal.SIGKILL)
        self.log_line(f"--- grace of {self.grace:g} s over: SIGKILL to what was left")

    def reap_orphans(self, child_pid: int | None) -> None:
        """Collect zombies reparented to us (we are their subreaper); never our own children's."""
        keep = set(self.exclude())
        if child_pid is not None:
            keep.add(child_pid)
        try:
            kids = psutil.Process().children()
        except psutil.Error:
            return
        for p in kids:
            if p.pid in keep:
                continue
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(p.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError, OSError):
                pass

    def stop_leftovers(self, child_pid: int) -> None:
        """After the training process ended: stop what of its tree outlived it (the grace that
        was left, if a stop had begun), then reap."""
        left = proctree.descendants(os.getpid(), self.exclude())
        tree_alive = [p for p in left if not proctree.gone(p)]
        if tree_alive:
            grace = (
                0.0
                if self.kill_at
                else (max(0.0, self.kill_deadline - time.monotonic()) if self.kill_deadline else min(self.grace, 5.0))
            )
            self.log_line(f"--- {len(tree_alive)} process(es) of the run outlived it: stopping them")
            res = proctree.stop_tree(
                os.getpid(),
                child_pid,
                grace,
                exclude=self.exclude(),
                tracked=list(self.tree.values()) + tree_alive,
                reap=lambda: self.reap_orphans(child_pid),
            )
            if res.kill_at and not self.kill_at:
                self.kill_at = res.kill_at
            if res.survivors:
                self.log_line(f"--- could not stop: {res.survivors}")
        self.reap_orphans(child_pid)
