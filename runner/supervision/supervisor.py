"""The run supervisor: one small process per attempt, next to the training process it watches.

`python -m runner.supervision.supervisor RUN_DIR` (docs/INTERNALS.md, "The supervisor"). It reads the frozen
`run.toml` and the runner's `launch.json`, starts the command in its own session, follows the metric
lines the moment they are written (inotify, else a tight adaptive poll), judges the frozen rules,
verifies new checkpoints in a fresh interpreter, and on a verdict writes `verdict.json` and stops
the whole process tree. `exit.json` is written last. It never needs the runner: a runner restart
neither stops a run nor delays a verdict, because the decision is made here.

One thread, one `selectors` loop: readiness of the metrics file (inotify), of the child's stdout
pipe (with `metrics_regex`), of each verifier's stdout, and of a signal wake-up pipe (SIGCHLD,
SIGTERM, SIGUSR1). Timers cover the time-based rules and `checkpoint_glob` scans.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from campaign_train.atomic import fsync_dir, read_json, write_json_atomic
from runner.campaign.errors import CampaignError
from runner.campaign.faultpoints import fault_point
from runner.supervision import cgroups, proctree
from runner.supervision.checkpoints import CheckpointWatcher
from runner.supervision.exit_record import OUTPUT_LOG, fail_before_start, last_output_line
from runner.supervision.launch_spec import LaunchSpec
from runner.supervision.metric_stream import FileWatch, MetricStream
from runner.supervision.rules import Judge, Verdict
from runner.supervision.run_tree import RunTree
from runner.supervision.stdout_metrics import StdoutMetrics

METRICS_FILE = "metrics.jsonl"
POLL_FAST, POLL_SLOW = 0.005, 0.1  # fallback poll (no inotify): fast while lines flow


class Supervisor:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.run_dir = spec.run_dir
        self.sel = selectors.DefaultSelector()
        self.child: subprocess.Popen | None = None
        self.child_ident: proctree.Identity | None = None
        self.killed_by: str | None = None
        self.verdict: Verdict | None = None
        self._odd_seen: set[str] = set()
        self.terms_received = 0
        self.terms_for_stop = 0  # the SIGTERMs that started the stop (abort, down): not a hurry
        self.usr1_pending = 0
        self.usr1_waiting_logged = False
        self.sigchld = 0
        self.stdout: StdoutMetrics | None = None  # runs that follow stdout (metrics_regex)
        self.log = open(self.run_dir / OUTPUT_LOG, "ab", buffering=0)
        self.run_tree = RunTree(self.run_dir, spec.attempt, spec.grace, lambda: self.checkpoints.pids(), self._log_line)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.last_data = 0.0

    @property
    def proc(self) -> subprocess.Popen:
        """The training process; the loop and the ending run only after `start` launched it."""
        if self.child is None:
            raise RuntimeError("the training process has not been started")
        return self.child

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        proctree.set_child_subreaper()
        self.cgroup = self._join_cgroup()
        self._install_signals()
        start_offset = self.metrics_path.stat().st_size if self.metrics_path.exists() else 0
        self.stream = MetricStream(self.metrics_path, start_offset=start_offset)
        # CAMPAIGN_SUPERVISOR_POLL=1 forces the fallback poll (hosts without inotify; benchmarks)
        self.watch = None if os.environ.get("CAMPAIGN_SUPERVISOR_POLL") else FileWatch.open_watch(self.metrics_path)
        if self.watch is not None:
            self.sel.register(self.watch, selectors.EVENT_READ, "metrics")
        self.started_at = time.time()
        self.judge = Judge(
            self.spec.rules,
            variant=self.spec.variant or None,
            started_at=self.started_at,
            source=self.run_dir / "run.toml",
        )
        if self.spec.resume_from:
            self.judge.checkpoint_verified(self.started_at)  # resumed from a verified checkpoint
        self.checkpoints = CheckpointWatcher(self.spec, self.sel, on_verified=self._checkpoint_verified)
        self._log_line(
            f"--- attempt {self.spec.attempt} of {self.spec.run_id} starting "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {' '.join(self.spec.argv)}"
        )
        out = subprocess.PIPE if self.spec.regex else self.log
        child = self.child = subprocess.Popen(
            self.spec.argv,
            cwd=self.spec.root,
            env=self.spec.environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
        self.child_ident = proctree.identity_of(child.pid)
        if self.spec.regex and child.stdout is not None:
            fd = child.stdout.fileno()
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, "stdout")
            self.stdout = StdoutMetrics(fd, self.spec.regex, self.log, self.sel, self._log_line, self._judge)
        me = proctree.identity_of(os.getpid())
        write_json_atomic(
            self.run_dir / "supervisor.json",
            {
                "pid": os.getpid(),
                "create_time": me.create_time if me else None,
                "child_pid": child.pid,
                "child_create_time": self.child_ident.create_time if self.child_ident else None,
                "pgid": child.pid,
                "cgroup": str(self.cgroup) if self.cgroup is not None else None,
                "attempt": self.spec.attempt,
                "started_at": self.started_at,
            },
        )

    def _join_cgroup(self) -> Path | None:
        """Into the attempt's cgroup before anything is started: every process the run forks is
        born there, and the runner finds them all should this supervisor be lost."""
        if self.spec.cgroup is None:
            return None
        try:
            cgroups.join(self.spec.cgroup)
        except OSError as exc:
            self._log_line(f"--- {exc}: the run's processes are tracked by this supervisor's process list only")
            return None
        return self.spec.cgroup

    def _install_signals(self) -> None:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        self.sel.register(rfd, selectors.EVENT_READ, "signal")
        self._sig_r = rfd

        def on_term(signum, frame):
            self.terms_received += 1

        def on_usr1(signum, frame):
            self.usr1_pending += 1

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGUSR1, on_usr1)

        def on_chld(signum, frame):
            self.sigchld += 1

        signal.signal(signal.SIGCHLD, on_chld)  # wakes the loop; orphans are reaped then
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        while self.proc.poll() is None:
            self._handle_signals()
            timeout = self._timeout()
            for key, _ in self.sel.select(timeout):
                self._dispatch(key)
            if self.watch is None:
                self._read_metrics()
            self._on_timers()
        return self._finish()

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        what = key.data
        if what == "metrics":
            if self.watch is not None:
                self.watch.drain()
            self._read_metrics()
        elif what == "stdout":
            if self.stdout is not None:
                self.stdout.read()
        elif what == "signal":
            try:
                while os.read(self._sig_r, 512):
                    pass
            except BlockingIOError:
                pass
            self._handle_signals()
        elif what == "verify":
            self.checkpoints.on_ready(key)

    def _timeout(self) -> float:
        now = time.time()
        t = [self.checkpoints.next_scan_in(), 1.0]
        deadline = self.judge.next_deadline()
        if deadline is not None:
            t.append(deadline - now + 0.001)
        if self.run_tree.kill_deadline is not None:
            t.append(self.run_tree.kill_deadline - time.monotonic())
        if self.watch is None:
            t.append(POLL_FAST if time.monotonic() - self.last_data < 1.0 else POLL_SLOW)
        return max(0.0, min(t))

    def _on_timers(self) -> None:
        if self.verdict is None and self.killed_by is None:
            v = self.judge.tick()
            if v is not None:
                self._on_verdict(v)
        self.checkpoints.maybe_scan()
        self.checkpoints.check_timeout()
        if self.child is not None:
            self.run_tree.record()
        if self.run_tree.kill_due():
            self.run_tree.kill_now(self.proc.pid)
        if self.sigchld:
            self.sigchld = 0
            self._reap_orphans()

    def _handle_signals(self) -> None:
        if self.usr1_pending and self.child is not None and self.child.poll() is None:
            # SIGUSR1's default action ends a process: a request that arrives while the training
            # process is still importing (no handler yet) waits until it catches the signal
            if proctree.catches_signal(self.child.pid, signal.SIGUSR1) is not False:
                self.usr1_pending = 0
                try:
                    os.kill(self.child.pid, signal.SIGUSR1)  # the training process only
                except ProcessLookupError:
                    pass
            elif not self.usr1_waiting_logged:
                self.usr1_waiting_logged = True
                self._log_line("--- checkpoint asked: waiting until the training process handles SIGUSR1")
        running = self.child is not None and self.child.poll() is None
        if self.terms_received and self.killed_by is None and running:
            by = "abort" if (self.run_dir / "abort.json").exists() else "down"
            self._log_line(f"--- supervisor asked to stop ({by}): stopping the run")
            self._begin_stop(by)
            self.terms_for_stop = self.terms_received
        # the checkpoint the script saves on the stop's SIGTERM is graded before the end is
        # written; only a SIGTERM asked again, or after the end, gives up waiting for gradings
        extra = self.terms_received - self.terms_for_stop
        if extra > 0 and (self.terms_received > 1 or not running):
            self.checkpoints.abandon()

    # -- metrics -------------------------------------------------------------------------------
    def _read_metrics(self) -> None:
        try:
            records = self.stream.poll()
        except OSError as exc:  # the metrics file is unreadable (a folder in its place...): say so, go on
            self._odd_line({"file": str(self.metrics_path)}, exc)
            return
        if records:
            self.last_data = time.monotonic()
            self._judge(records)

    def _judge(self, records: list[dict]) -> None:
        now = time.time()
        events = []
        for rec in records:
            if "event" in rec:
                events.append(rec)
                continue
            if self.verdict is None and self.killed_by is None:  # an abort is not re-judged
                try:
                    v = self.judge.feed(rec, now)
                except Exception as exc:  # containment: one odd line never ends the supervisor
                    self._odd_line(rec, exc)
                    continue
                if v is not None:
                    self._on_verdict(v)
        for ev in events:
            if ev.get("event") == "checkpoint":
                try:
                    self.checkpoints.on_event(ev)
                except Exception as exc:  # a checkpoint event naming no file it could grade
                    self._odd_line(ev, exc)

    def _odd_line(self, rec: dict, exc: Exception) -> None:
        """Say once per kind of error that a line was skipped (output.log), and go on."""
        what = f"{type(exc).__name__}: {exc}"[:200]
        if what not in self._odd_seen:
            self._odd_seen.add(what)
            self._log_line(f"--- skipped a metric line that could not be used ({what}): {str(rec)[:200]}")

    def _checkpoint_verified(self, at: float) -> None:
        self.judge.checkpoint_verified(at)

    # -- stopping ------------------------------------------------------------------------------
    def _on_verdict(self, v: Verdict) -> None:
        self.verdict = v
        path = self.run_dir / "verdict.json"
        # visible at once to every reader; made durable just after the signal goes out
        write_json_atomic(path, v.to_json(self.spec.attempt), durable=False)
        fault_point("supervisor:after_verdict_json")
        running = self.child is not None and self.child.poll() is None
        if running and self.killed_by is None:
            self._begin_stop("rule")
        try:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        except OSError:
            pass
        fsync_dir(self.run_dir)
        self._log_line(
            f"--- stopped by rule {v.kind}: {v.reason}" if running else f"--- rule {v.kind} broken: {v.reason}"
        )

    def _begin_stop(self, by: str) -> None:
        """SIGTERM the group (and any descendant that left it), then SIGKILL after the grace."""
        self.killed_by = by
        self.run_tree.begin_stop(self.proc.pid)

    def _reap_orphans(self) -> None:
        self.run_tree.reap_orphans(self.child.pid if self.child is not None else None)

    # -- the end -------------------------------------------------------------------------------
    def _finish(self) -> int:
        rc = self.proc.returncode
        ended_at = time.time()
        # lines written just before the exit still count (a final NaN is still a broken rule)
        self._read_metrics()
        if self.stdout is not None:
            self.stdout.drain(0.2)
        self.run_tree.stop_leftovers(self.proc.pid)
        gone_at = time.time()
        if self.stdout is not None:
            self.stdout.drain(1.0)
        self.checkpoints.scan_now(final=True)
        self._read_metrics()
        self.checkpoints.wait_all(self._dispatch)
        sig = -rc if rc < 0 else None
        exit_info = {
            "attempt": self.spec.attempt,
            "returncode": rc if rc >= 0 else None,
            "signal": sig,
            "signal_name": signal.Signals(sig).name if sig else None,
            "ended_at": ended_at,
            "pid": self.proc.pid,
            "killed_by": self.killed_by,
            "term_at": self.run_tree.term_at,
            "kill_at": self.run_tree.kill_at,
            "tree_gone_at": gone_at,
            "verdict": self.verdict is not None,
            # regex-followed runs: the lines metrics_regex parsed from stdout count too
            "metric_lines": self.stream.lines + (self.stdout.lines if self.stdout is not None else 0),
            "garbage_lines": self.stream.garbage,
            "restarts": self.stream.restarts,
            "checkpoints_verified": self.checkpoints.verified_count,
            "last_output_line": last_output_line(self.run_dir / OUTPUT_LOG),
            "matched_without_numbers": self.spec.regex.matched_empty if self.spec.regex is not None else 0,
        }
        self._log_line(
            f"--- attempt {self.spec.attempt} ended: "
            + (f"signal {exit_info['signal_name']}" if sig else f"exit code {rc}")
            + (f", killed by {self.killed_by}" if self.killed_by else "")
        )
        fault_point("supervisor:before_exit_json")
        write_json_atomic(self.run_dir / "exit.json", exit_info)
        fault_point("supervisor:after_exit_json")
        return 0

    def _log_line(self, text: str) -> None:
        try:
            self.log.write((text + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m runner.supervision.supervisor RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).absolute()
    attempt = (read_json(run_dir / "launch.json") or {}).get("attempt", 1)
    try:
        spec = LaunchSpec(run_dir)
    except CampaignError as exc:
        fail_before_start(run_dir, attempt, str(exc), 2)
        print(exc, file=sys.stderr)
        return 2
    sup = Supervisor(spec)
    try:
        sup.start()
    except OSError as exc:  # command not found, not executable, bad cwd
        fail_before_start(run_dir, spec.attempt, f"{spec.argv[0]}: {exc.strerror or exc}", 127)
        return 1
    except ValueError as exc:  # a NUL in the command or the environment: the OS cannot take it
        fail_before_start(run_dir, spec.attempt, f"the command cannot be started: {exc}", 127)
        return 1
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
