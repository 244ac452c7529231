"""The supervisor's checkpoint side: notice new checkpoints and prove each reloads.

A checkpoint is noticed from the harness's `checkpoint` event line, or, for scripts that save on
their own, as a new `checkpoint_glob` match (a file, or a folder such as the HF Trainer's
`checkpoint-N/`) whose size and mtime held still across two scans. Each is graded in a fresh
interpreter by the same command `campaign checkpoint` and `verify` use
(`runner.grading.checkpoint_grade.grader_command`), one at a time, with no GPU visible so a
verifier never takes memory from the training process. The result lands beside the artifact as
`<name>.verify.json`.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from campaign_train.atomic import read_json, write_json_atomic
from campaign_train.formats import verify_path_for
from runner.grading.client import grader_command, grader_env, read_answer
from runner.grading.interpreter import grader_python
from runner.grading.result import failed
from runner.supervision import kept_copy

SCAN_SECONDS = 1.0
VERIFY_TIMEOUT = 900.0  # one checkpoint's grading; a hung verifier is killed
FINAL_WAIT = 900.0  # how long the end of an attempt waits for pending verifications


def step_of(ckpt: Path, hint: object = None) -> int | None:
    if isinstance(hint, int) and not isinstance(hint, bool):
        return hint
    side = read_json(ckpt.with_suffix(".json"))
    if isinstance(side, dict) and isinstance(side.get("step"), int):
        return side["step"]
    m = re.findall(r"\d+", ckpt.stem)
    return int(m[-1]) if m else None


def write_verify_record(
    path: Path,
    step: int | None,
    result: dict | None,
    problems: list[str],
    seconds: float,
    at: float,
    kept: str | None = None,
    source: tuple[int, int] | None = None,
) -> dict:
    """`<name>.verify.json` beside the checkpoint: what the runner ingests into the ledger.

    `source` is the (size, mtime_ns) of the version graded: a file the script rewrites in place
    may change again while it is graded, and only this says which version the record speaks for."""
    record = {
        "path": str(path),
        "step": step,
        "kept_copy": kept,
        "verified": bool(result and result.get("verified")),
        "grade": (result or {}).get("grade", "unreadable"),
        "holds": (result or {}).get("holds", []),
        "problems": (result or {}).get("problems", []) + problems,
        "verify_seconds": round(seconds, 3),
        "at": at,
    }
    if source is not None:
        record["source_signature"] = list(source)
    write_json_atomic(verify_path_for(path), record)
    return record


def grade_now(
    path: Path,
    root: Path,
    timeout: float = VERIFY_TIMEOUT,
    command: list[str] | None = None,
    *,
    trust_pickled_module: bool = False,
) -> dict:
    """Grade one checkpoint in a fresh interpreter and write its record; blocking. For the runner,
    which must sometimes judge a checkpoint no supervisor saw (one written by an orphaned process
    while it was being stopped)."""
    t0 = time.monotonic()
    problems: list[str] = []
    result = None
    try:
        proc = subprocess.run(
            grader_command([path], trust_pickled_module=trust_pickled_module, python=grader_python(command, root)),
            cwd=root,
            env=grader_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        result = read_answer(
            path.absolute(),
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
            proc.returncode,
        )
    except subprocess.TimeoutExpired:
        problems.append("verifier timed out")
    except OSError as exc:
        problems.append(f"verifier failed: {exc}")
    return write_verify_record(
        path,
        step_of(path, None if result is None else result.get("step")),
        result,
        problems,
        time.monotonic() - t0,
        time.time(),
    )


def _graded_already(record_path: Path, sig: tuple[int, int]) -> bool:
    """Does the verify record beside a glob match speak for this version of it?

    By the version's signature when the record names one. A record written after the file's
    mtime is not proof: a script that rewrites its checkpoint in place can save a new version
    while the old one is still being graded, and that new version would never be graded."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    source = record.get("source_signature") if isinstance(record, dict) else None
    if isinstance(source, list) and len(source) == 2:
        return tuple(source) == tuple(sig)
    try:  # a record from before signatures were kept
        return record_path.stat().st_mtime_ns >= sig[1]
    except OSError:
        return False


class _Job:
    def __init__(self, path: Path, step: int | None, from_glob: bool = False) -> None:
        self.path = path
        self.step = step
        self.from_glob = from_glob  # a file the script saves itself, maybe in place
        self.snapshot: Path | None = None  # what was graded instead of the live file
        self.graded: Path = path
        self.sig: tuple[int, int] | None = None
        self.copy_problem: str | None = None
        self.proc: subprocess.Popen | None = None
        self.out = b""
        self.err: IO[bytes] | None = None  # the verifier's stderr, kept for its last line
        self.started = 0.0

    def pipes(self) -> tuple[subprocess.Popen, IO[bytes], IO[bytes]]:
        """The running verifier, its stdout and its stderr file (once `_start_next` started it)."""
        if self.proc is None or self.proc.stdout is None or self.err is None:
            raise RuntimeError(f"no verifier running for {self.path}")
        return self.proc, self.proc.stdout, self.err


class CheckpointWatcher:
    """Queue of checkpoints to grade, run one verifier at a time inside the supervisor's loop."""

    def __init__(self, spec, sel: selectors.BaseSelector, on_verified: Callable[[float], None]) -> None:
        self.root: Path = spec.root
        self.run_dir: Path = spec.run_dir
        self.glob: str | None = spec.checkpoint_glob
        self.trust_pickled_module = bool(getattr(spec, "trust_pickled_module", False))
        self.python = grader_python(getattr(spec, "argv", None), spec.root)  # torch: the tool's, else the run's
        self.sel = sel
        self.on_verified = on_verified
        self.queue: list[_Job] = []
        self.job: _Job | None = None
        self.seen: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) handled
        self.pending_sizes: dict[str, tuple[int, int]] = {}  # glob matches waiting to be stable
        self.next_scan = time.monotonic()
        self.verified_count = 0
        self.abandoned = False

    # -- noticing ------------------------------------------------------------------------------
    def on_event(self, ev: dict) -> None:
        raw = ev.get("path")
        if not isinstance(raw, str) or not raw or not Path(raw).name or "\x00" in raw:
            return  # names no file ("/" * 300, a NUL): nothing to grade
        path = Path(raw)
        if not path.is_absolute():
            path = self.root / raw if (self.root / raw).exists() else self.run_dir / raw
        self._enqueue(path, ev.get("step"))

    def next_scan_in(self) -> float:
        if not self.glob:
            return 3600.0
        return max(0.0, self.next_scan - time.monotonic())

    def maybe_scan(self) -> None:
        if self.glob and time.monotonic() >= self.next_scan:
            self.scan_now()

    def scan_now(self, final: bool = False) -> None:
        """Look for new `checkpoint_glob` matches; `final` (the run has ended: nothing is still
        being written) takes them without waiting for a second look."""
        if not self.glob:
            return
        self.next_scan = time.monotonic() + SCAN_SECONDS
        kept = kept_copy.kept_dir(self.run_dir)
        ready = []
        for path in self.root.glob(self.glob):
            if path.name.endswith((".verify.json", ".unverified", ".restoring")) or kept in path.parents:
                continue
            if not (path.is_file() or path.is_dir()):
                continue
            try:
                sig = kept_copy.signature(path)
            except OSError:
                continue
            if sig[0] == 0 and path.is_dir():
                continue  # a folder being created: nothing in it yet
            key = str(path)
            if (key, *sig) in self.seen:
                continue
            if self.pending_sizes.get(key) != sig and not final:
                self.pending_sizes[key] = sig  # changed since the last scan: wait
                continue
            self.pending_sizes.pop(key, None)
            if _graded_already(verify_path_for(path), sig):
                self.seen.add((key, *sig))  # this very version was graded by an earlier attempt
                continue
            ready.append((step_of(path), sig[1], path))
        # oldest step first, so the kept copy ends on the newest (name order puts 100 before 20)
        for _, _, path in sorted(ready, key=lambda r: (r[0] is None, r[0] or 0, r[1])):
            self._enqueue(path, None, from_glob=True)

    def _enqueue(self, path: Path, step: object, from_glob: bool = False) -> None:
        try:
            key = (str(path), *kept_copy.signature(path))
        except OSError:
            key = (str(path), -1, -1)
        if key in self.seen:
            return
        self.seen.add(key)
        self.queue.append(_Job(path, step_of(path, step), from_glob))
        self._start_next()

    # -- grading -------------------------------------------------------------------------------
    def pids(self) -> set[int]:
        return {self.job.proc.pid} if self.job and self.job.proc else set()

    def _start_next(self) -> None:
        if self.job is not None or not self.queue or self.abandoned:
            return
        job = self.queue.pop(0)
        if not job.path.exists():
            self._record(job, None, ["the checkpoint file is gone"])
            return self._start_next()
        job.started = time.monotonic()
        if job.from_glob:  # grade a copy: the script may rewrite (or truncate) the file meanwhile
            try:
                job.snapshot, job.sig = kept_copy.snapshot(job.path, self.run_dir, self.root)
                if kept_copy.signature(job.path) != job.sig:
                    # rewritten while being copied: the copy may be torn; the next scan takes the new one
                    kept_copy.discard(job.snapshot)
                    self.seen.discard((str(job.path), *job.sig))
                    return self._start_next()
            except FileNotFoundError:
                return self._start_next()  # replaced meanwhile: the next scan finds the new file
            except OSError as exc:
                job.copy_problem = f"no copy kept of the last good version: {exc}"
        job.err = tempfile.TemporaryFile()
        graded = job.snapshot or job.path
        job.graded = graded.absolute()
        try:
            job.proc = subprocess.Popen(
                grader_command([job.graded], trust_pickled_module=self.trust_pickled_module, python=self.python),
                cwd=self.root,
                env=grader_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=job.err,
                start_new_session=True,
            )
        except OSError as exc:
            self._record(job, None, [f"could not start the verifier: {exc}"])
            return self._start_next()
        _, out, _ = job.pipes()
        os.set_blocking(out.fileno(), False)
        self.sel.register(out, selectors.EVENT_READ, "verify")
        self.job = job

    def on_ready(self, key: selectors.SelectorKey) -> None:
        job = self.job
        if job is None or job.proc is None or key.fileobj is not job.proc.stdout:
            return
        _, out, _ = job.pipes()
        try:
            data = os.read(out.fileno(), 65536)
        except BlockingIOError:
            return
        if data:
            job.out += data
            return
        self._complete(job)

    def check_timeout(self) -> None:
        job = self.job
        if job and job.proc and time.monotonic() - job.started > VERIFY_TIMEOUT:
            job.proc.kill()
            job.out = b""
            self._complete(job, timed_out=True)

    def _complete(self, job: _Job, timed_out: bool = False) -> None:
        proc, out, err = job.pipes()
        self.sel.unregister(out)
        out.close()
        rc = proc.wait()
        self.job = None
        err.seek(0)
        err_text = err.read()[-4000:].decode("utf-8", "replace")
        err.close()
        if timed_out:
            result = failed(str(job.graded), "verifier timed out")
        else:
            result = read_answer(job.graded, job.out.decode("utf-8", "replace"), err_text, rc)
        result["path"] = str(job.path)
        problems: list[str] = []
        self._record(job, result, problems)
        self._start_next()

    def _record(self, job: _Job, result: dict | None, problems: list[str]) -> None:
        now = time.time()
        verified = bool(result and result.get("verified"))
        step = job.step if job.step is not None else (result or {}).get("step")
        kept = None
        if job.snapshot is not None:
            if verified and job.sig is not None:  # the copy and its signature are taken together
                kept_at = kept_copy.keep(job.snapshot, job.path, job.sig, step, now)
                kept = str(kept_at) if kept_at else None
            else:
                kept_copy.discard(job.snapshot)
        if job.copy_problem:
            problems = problems + [job.copy_problem]
        write_verify_record(
            job.path,
            step,
            result,
            problems,
            time.monotonic() - job.started if job.started else 0.0,
            now,
            kept=kept,
            source=job.sig,
        )
        if verified:
            self.verified_count += 1
            self.on_verified(now)

    # -- the end -------------------------------------------------------------------------------
    def wait_all(self, dispatch: Callable[[selectors.SelectorKey], None]) -> None:
        """Finish pending gradings (the attempt's last checkpoint is its resume point); other
        ready keys go to `dispatch` (signals may still arrive meanwhile)."""
        deadline = time.monotonic() + FINAL_WAIT
        while (self.job or self.queue) and not self.abandoned and time.monotonic() < deadline:
            for key, _ in self.sel.select(0.2):
                if key.data == "verify":
                    self.on_ready(key)
                else:
                    dispatch(key)
            self.check_timeout()
        self.abandon()

    def abandon(self) -> None:
        self.abandoned = True
        self.queue.clear()
        job = self.job
        if job and job.proc and job.proc.poll() is None:
            try:
                os.killpg(job.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            job.proc.wait()
        if job and job.proc:  # not graded: a later attempt or scan grades it
            _, out, err = job.pipes()
            self.sel.unregister(out)
            out.close()
            err.close()
            self.job = None
