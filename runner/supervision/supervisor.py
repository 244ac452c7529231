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
import tomllib
from pathlib import Path

import psutil

from campaign_train.atomic import fsync_dir, read_json, write_json_atomic
from runner.campaign.durations import parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.faultpoints import fault_point
from runner.campaign.placeholders import expand_opt
from runner.campaign.statedir import paths_for
from runner.import_paths import training_env
from runner.supervision import proctree
from runner.supervision.checkpoints import CheckpointWatcher
from runner.supervision.metric_stream import FileWatch, MetricStream, line_parser
from runner.supervision.rules import Judge, Verdict

METRICS_FILE = "metrics.jsonl"
TREE_SECONDS = 1.0  # how often the run's process list (tree.json) is brought up to date
OUTPUT_LOG = "output.log"
EMPTY_MATCH_WARNING = 3  # lines a metrics regex/format matched without a number before it says so
DEFAULT_GRACE = 30.0
POLL_FAST, POLL_SLOW = 0.005, 0.1  # fallback poll (no inotify): fast while lines flow


class LaunchSpec:
    """What to run: the frozen run.toml and this attempt's launch.json, checked."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        toml_path = run_dir / "run.toml"
        try:
            self.config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CampaignError("the run folder has no run.toml", file=toml_path) from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CampaignError(f"cannot read: {exc}", file=toml_path) from None
        launch_path = run_dir / "launch.json"
        launch = read_json(launch_path)
        if not isinstance(launch, dict):
            raise CampaignError("missing or not a JSON object", file=launch_path)
        run = self.config.get("run", {})
        self.variant_tbl = self.config.get("variant", {})
        self.run_id = str(run.get("id") or run_dir.name)
        self.variant = str(run.get("variant") or self.variant_tbl.get("name") or "")
        self.attempt = int(launch.get("attempt", 1))
        argv = launch.get("argv") or self.variant_tbl.get("command")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise CampaignError("expected a non-empty list of strings", file=launch_path, field="argv")
        self.argv = argv
        self.grace = float(launch.get("grace_seconds", DEFAULT_GRACE))
        self.resume_from = launch.get("resume_from")
        self.launch_env = {str(k): str(v) for k, v in (launch.get("env") or {}).items()}
        self.root = self._campaign_root(run)
        self.rules = self.config.get("rule", [])
        self.regex = line_parser(self.variant_tbl.get("metrics_regex"), self.variant_tbl.get("metrics_format"))
        self.checkpoint_glob = expand_opt(self.variant_tbl.get("checkpoint_glob"), self.run_id)
        self.trust_pickled_module = bool(self.variant_tbl.get("trust_pickled_module", False))
        every = self.variant_tbl.get("checkpoint_every")
        try:
            self.checkpoint_every = parse_duration(every) if isinstance(every, str) else every
        except ValueError as exc:
            raise CampaignError(str(exc), file=toml_path, field="variant.checkpoint_every") from None
        # the judge is built here so a bad rule fails before anything starts
        Judge(self.rules, variant=self.variant or None, source=toml_path)

    def _campaign_root(self, run: dict) -> Path:
        for key in ("root", "campaign_root", "campaign_dir", "campaign"):
            value = run.get(key)
            if isinstance(value, str) and os.path.isabs(value) and os.path.isdir(value):
                return Path(value)
        return self.run_dir.parent.parent  # <campaign>/runs/<id>/

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.variant_tbl.get("env") or {}).items()})
        env.update({str(k): str(v) for k, v in (self.config.get("env") or {}).items()})
        env.update(self.launch_env)
        env.update(
            {
                "CAMPAIGN_RUN_ID": self.run_id,
                "CAMPAIGN_RUN_DIR": str(self.run_dir),
                "CAMPAIGN_DIR": str(self.root),
                "CAMPAIGN_ATTEMPT": str(self.attempt),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        if self.checkpoint_every:
            env["CAMPAIGN_CHECKPOINT_EVERY"] = f"{float(self.checkpoint_every):g}"
        if self.resume_from:
            env["CAMPAIGN_RESUME_FROM"] = str(self.resume_from)
        else:
            env.pop("CAMPAIGN_RESUME_FROM", None)
        return training_env(env, paths_for(self.root).dir)


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


class Supervisor:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.run_dir = spec.run_dir
        self.sel = selectors.DefaultSelector()
        self.child: subprocess.Popen | None = None
        self.child_ident: proctree.Identity | None = None
        self.killed_by: str | None = None
        self.verdict: Verdict | None = None
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.kill_deadline: float | None = None
        self.tree: dict[int, psutil.Process] = {}
        self._tree_at = 0.0
        self._odd_seen: set[str] = set()
        self._tree_seen: frozenset = frozenset()
        self.terms_received = 0
        self.terms_for_stop = 0  # the SIGTERMs that started the stop (abort, down): not a hurry
        self.usr1_pending = 0
        self.usr1_waiting_logged = False
        self.sigchld = 0
        self.pipe_buf = b""
        self.stdout_fd: int | None = None
        self.log = open(self.run_dir / OUTPUT_LOG, "ab", buffering=0)
        self.regex_lines = 0  # metric lines parsed from stdout by metrics_regex
        self.empty_warned = False
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
            self.stdout_fd = child.stdout.fileno()
            os.set_blocking(self.stdout_fd, False)
            self.sel.register(self.stdout_fd, selectors.EVENT_READ, "stdout")
        me = proctree.identity_of(os.getpid())
        write_json_atomic(
            self.run_dir / "supervisor.json",
            {
                "pid": os.getpid(),
                "create_time": me.create_time if me else None,
                "child_pid": child.pid,
                "child_create_time": self.child_ident.create_time if self.child_ident else None,
                "pgid": child.pid,
                "attempt": self.spec.attempt,
                "started_at": self.started_at,
            },
        )

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
            self._read_stdout()
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
        if self.kill_deadline is not None:
            t.append(self.kill_deadline - time.monotonic())
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
        self._record_tree()
        if self.kill_deadline is not None and self.kill_at is None and time.monotonic() >= self.kill_deadline:
            self._kill_now()
        if self.sigchld:
            self.sigchld = 0
            self._reap_orphans()

    def _record_tree(self) -> None:
        """`tree.json`: the run's processes (pid, start time) as last seen, at most once a second.
        Should this supervisor be lost, the runner stops every one still alive — setsid'd
        grandchildren too, and those of a training process already dead of the broken pipe
        (metrics_regex) — not only the training process's own group."""
        now = time.monotonic()
        if now - self._tree_at < TREE_SECONDS or self.child is None:
            return
        self._tree_at = now
        seen = []
        for p in proctree.descendants(os.getpid(), self.checkpoints.pids()):
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
                {"attempt": self.spec.attempt, "at": time.time(), "processes": sorted(seen)},
                durable=False,
            )
        except OSError:
            pass  # a full disk: the last list stands

    def _handle_signals(self) -> None:
        if self.usr1_pending and self.child is not None and self.child.poll() is None:
            # SIGUSR1's default action ends a process: a request that arrives while the training
            # process is still importing (no handler yet) waits until it catches the signal
            if catches_signal(self.child.pid, signal.SIGUSR1) is not False:
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

    def _read_stdout(self) -> None:
        fd = self.stdout_fd
        if fd is None:
            return
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(fd)
            self.stdout_fd = None
            if self.pipe_buf:
                self._parse_stdout(self.pipe_buf + b"\n")
                self.pipe_buf = b""
            return
        self.log.write(data)
        buf = self.pipe_buf + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self.pipe_buf = buf[-1_000_000:]
            return
        self.pipe_buf = buf[cut + 1 :]
        self._parse_stdout(buf[: cut + 1])

    def _parse_stdout(self, block: bytes) -> None:
        if self.spec.regex is None:
            return
        parser = self.spec.regex
        records, _ = parser.parse_block(block)
        self.regex_lines += len(records)
        if parser.matched_empty >= EMPTY_MATCH_WARNING and not self.regex_lines and not self.empty_warned:
            self.empty_warned = True  # said once: a regex that matches yet parses nothing follows nothing
            self._log_line(
                f"--- warning: metrics_regex matched {parser.matched_empty} lines but parsed no number from "
                'them (check its named groups; HF Trainer lines: use metrics_format = "hf")'
            )
        if records:
            now = time.time()
            for r in records:
                r.setdefault("t", now)
            self._judge(records)

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
        pgid = self.proc.pid
        self.term_at = time.time()
        proctree.signal_group(pgid, signal.SIGTERM)
        self.kill_deadline = time.monotonic() + self.spec.grace
        for p in proctree.descendants(os.getpid(), self.checkpoints.pids()):
            self.tree.setdefault(p.pid, p)
            try:
                if os.getpgid(p.pid) != pgid:
                    p.send_signal(signal.SIGTERM)
            except (OSError, psutil.Error):
                pass

    def _kill_now(self) -> None:
        self.kill_at = time.time()
        proctree.signal_group(self.proc.pid, signal.SIGKILL)
        for p in proctree.descendants(os.getpid(), self.checkpoints.pids()):
            self.tree.setdefault(p.pid, p)
        proctree.signal_each([p for p in self.tree.values() if not proctree.gone(p)], signal.SIGKILL)
        self._log_line(f"--- grace of {self.spec.grace:g} s over: SIGKILL to what was left")

    def _reap_orphans(self) -> None:
        """Collect zombies reparented to us (we are their subreaper); never our own children's."""
        keep = set(self.checkpoints.pids())
        if self.child is not None:
            keep.add(self.child.pid)
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

    # -- the end -------------------------------------------------------------------------------
    def _finish(self) -> int:
        rc = self.proc.returncode
        ended_at = time.time()
        # lines written just before the exit still count (a final NaN is still a broken rule)
        self._read_metrics()
        if self.stdout_fd is not None:
            self._drain_stdout(0.2)
        left = proctree.descendants(os.getpid(), self.checkpoints.pids())
        tree_alive = [p for p in left if not proctree.gone(p)]
        if tree_alive:
            grace = (
                0.0
                if self.kill_at
                else (
                    max(0.0, self.kill_deadline - time.monotonic()) if self.kill_deadline else min(self.spec.grace, 5.0)
                )
            )
            self._log_line(f"--- {len(tree_alive)} process(es) of the run outlived it: stopping them")
            res = proctree.stop_tree(
                os.getpid(),
                self.proc.pid,
                grace,
                exclude=self.checkpoints.pids(),
                tracked=list(self.tree.values()) + tree_alive,
                reap=self._reap_orphans,
            )
            if res.kill_at and not self.kill_at:
                self.kill_at = res.kill_at
            if res.survivors:
                self._log_line(f"--- could not stop: {res.survivors}")
        self._reap_orphans()
        gone_at = time.time()
        if self.stdout_fd is not None:
            self._drain_stdout(1.0)
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
            "term_at": self.term_at,
            "kill_at": self.kill_at,
            "tree_gone_at": gone_at,
            "verdict": self.verdict is not None,
            # regex-followed runs: the lines metrics_regex parsed from stdout count too
            "metric_lines": self.stream.lines + (self.regex_lines if self.spec.regex is not None else 0),
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

    def _drain_stdout(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.stdout_fd is not None and time.monotonic() < deadline:
            if not any(k.data == "stdout" for k, _ in self.sel.select(0.05)):
                continue
            self._read_stdout()

    def _log_line(self, text: str) -> None:
        try:
            self.log.write((text + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def fail_before_start(run_dir: Path, attempt: int, message: str, returncode: int) -> None:
    """The command could not start: say why in output.log and write exit.json so the run reads
    as failed instead of 'supervisor lost'."""
    try:
        with open(run_dir / OUTPUT_LOG, "ab") as f:
            f.write(f"--- supervisor could not start the run: {message}\n".encode())
        write_json_atomic(
            run_dir / "exit.json",
            {
                "attempt": attempt,
                "returncode": returncode,
                "signal": None,
                "ended_at": time.time(),
                "pid": None,
                "killed_by": None,
                "error": message,
            },
        )
    except OSError:
        pass


def last_output_line(log: Path, tail_bytes: int = 8192) -> str | None:
    """The run's last line of output (a traceback's last line names the error), the
    supervisor's own `---` lines left out; for a failed run's reason."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("--- "):
            return text[:300]
    return None


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
