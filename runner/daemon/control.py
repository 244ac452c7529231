"""Starting and stopping a campaign's runner: `campaign up`, `campaign down`, `ensure_running`.

`up` starts `python -m runner.daemon.server FILE --detach`: the daemon forks once and its parent exits, so
the runner is nobody's child, sits in a session of its own with no terminal, and outlives the SSH
session (its stdio goes to `.campaign/runner.log`). One runner per campaign folder: the daemon holds
an `fcntl.flock` on `.campaign/runner.lock` for its whole life, so a second `up` only finds it
running. Where systemd-logind kills a login session's processes at logout (`KillUserProcesses=yes`)
a new session is not enough: the runner then goes through `systemd-run --user` (after
`loginctl enable-linger`), or `up` says plainly that it will not outlive the session.

`down` asks the runner over the socket and waits for it to exit; when the socket does not answer
it sends SIGTERM to the pid in `runner.pid`, after checking that pid is still our runner (pid,
process start time and command line), never to a process that merely reused the number.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.campaign.errors import RunnerStartFailed, RunnerUnavailable
from runner.campaign.statedir import StatePaths, paths_for
from runner.daemon import client
from runner.daemon.containment import FATAL_MARKS
from runner.daemon.detach import DetachPlan, LogindFacts, decide_detach, gather_logind_facts
from runner.import_paths import MARK_VAR, ORIGINAL_SAFE_VAR, ORIGINAL_VAR, SAFE_VAR, tool_env

DAEMON_MODULE = "runner.daemon.server"


@dataclass(frozen=True)
class UpResult:
    started: bool  # False: it was already running
    pid: int | None
    message: str
    warning: str | None = None


@dataclass(frozen=True)
class DownResult:
    was_running: bool
    pid: int | None
    message: str


# ---------------------------------------------------------------------------------------------
# the pid file and the lock


def read_pid_file(paths: StatePaths) -> dict | None:
    try:
        info = json.loads(paths.pid.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("pid"), int) else None


def is_our_runner(info: dict | None, paths: StatePaths) -> bool:
    """The pid file's process is alive and is this folder's runner (not a reused pid)."""
    if not info:
        return False
    import psutil

    try:
        proc = psutil.Process(info["pid"])
        if abs(proc.create_time() - float(info.get("create_time", -1))) > 0.05:
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmd = " ".join(proc.cmdline())
    except (psutil.Error, TypeError, ValueError):
        return False
    return DAEMON_MODULE in cmd and str(paths.root) in cmd


def lock_is_held(paths: StatePaths) -> bool:
    """True when some process holds `runner.lock` (a runner is alive, maybe still starting)."""
    try:
        fd = os.open(paths.lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # a file system without locks: no runner can hold it (the runner says so)
    finally:
        os.close(fd)
    return False


# ---------------------------------------------------------------------------------------------
# up / down


def _daemon_argv(campaign_file: Path, *, detach: bool) -> list[str]:
    argv = [sys.executable, "-m", DAEMON_MODULE, str(campaign_file)]
    return argv + ["--detach"] if detach else argv


def _log_tail(paths: StatePaths, lines: int = 8) -> str:
    try:
        text = paths.log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _spawn(campaign: Any, plan: DetachPlan, paths: StatePaths) -> tuple[str | None, int | None]:
    """Start the daemon; returns (warning, returncode of the launcher when it already exited)."""
    env = dict(os.environ)
    env = tool_env(env)
    if plan.how == "systemd-run":
        unit = "campaign-" + hashlib.sha256(str(paths.root).encode()).hexdigest()[:10]
        subprocess.run(["loginctl", "enable-linger"], capture_output=True, timeout=10)
        cmd = ["systemd-run", "--user", "--collect", "--quiet", f"--unit={unit}", f"--working-directory={paths.root}"]
        for key in (
            "PYTHONPATH",
            ORIGINAL_VAR,
            MARK_VAR,
            SAFE_VAR,
            ORIGINAL_SAFE_VAR,
            "CAMPAIGN_SLOTS",
            "PATH",
            "VIRTUAL_ENV",
        ):
            if env.get(key):
                cmd.append(f"--setenv={key}={env[key]}")
        res = subprocess.run(
            cmd + _daemon_argv(campaign.path, detach=False), capture_output=True, text=True, timeout=30
        )
        if res.returncode == 0:
            return None, None
        plan = DetachPlan(
            "session",
            f"systemd-run --user failed ({res.stderr.strip() or res.returncode}); "
            "the runner was started in a new session instead and will NOT outlive this "
            "SSH session.",
            "fallback",
        )
    with open(os.devnull, "rb") as devnull, open(paths.log, "ab") as log:
        os.chmod(paths.log, 0o600)
        proc = subprocess.Popen(
            _daemon_argv(campaign.path, detach=True),
            stdin=devnull,
            stdout=log,
            stderr=log,
            cwd=str(paths.root),
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    rc = proc.wait(timeout=60)  # the launcher forks the runner and exits at once
    return plan.warning, rc


def up(campaign: Any, *, wait_seconds: float = 30.0, facts: LogindFacts | None = None) -> UpResult:
    """Start the runner for `campaign` unless one runs; returns when it answers on its socket."""
    paths = paths_for(campaign)
    paths.ensure()
    pong = client.ping(paths)
    if pong:
        return UpResult(False, pong.get("pid"), f"the runner is already running (pid {pong.get('pid')})")
    # concurrent `up`s take turns: the first starts the runner, the others then find it running
    # (each said "the runner started" before)
    with _up_turn(paths, wait_seconds):
        pong = client.ping(paths)
        if pong:
            return UpResult(False, pong.get("pid"), f"the runner is already running (pid {pong.get('pid')})")
        return _start(campaign, paths, wait_seconds, facts)


@contextlib.contextmanager
def _up_turn(paths: StatePaths, wait_seconds: float) -> Iterator[None]:
    fd = os.open(paths.dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break  # the other `up` hangs: go on without the turn rather than hang too
                time.sleep(0.05)
            except OSError:
                break  # a file system without locks: the runner refuses it with the reason
        yield
    finally:
        os.close(fd)


def _start(campaign: Any, paths: StatePaths, wait_seconds: float, facts: LogindFacts | None) -> UpResult:
    warning, rc = None, None
    log_from = _log_size(paths)
    spawned = False
    if not lock_is_held(paths):
        plan = decide_detach(facts or gather_logind_facts())
        warning, rc = _spawn(campaign, plan, paths)
        spawned = True
    started = time.monotonic()
    died = False
    while time.monotonic() - started < wait_seconds:
        pong = client.ping(paths, timeout=2.0)
        if pong:
            return UpResult(
                True, pong.get("pid"), f"the runner started (pid {pong.get('pid')}); log: {paths.log}", warning
            )
        if rc not in (None, 0):
            died = True
            break  # the launcher itself failed (a bad campaign file, say)
        if spawned and any(m in _log_since(paths, log_from) for m in FATAL_MARKS):
            died = True
            break  # it said why it cannot start, or a fatal signal's traceback is there
        if time.monotonic() - started > 5 and not lock_is_held(paths):
            died = True
            break  # no runner holds the lock: it died while starting
        time.sleep(0.1)
    if died and spawned:
        raise RunnerStartFailed(_death_reason(paths, log_from))
    tail = _log_tail(paths)
    raise RunnerUnavailable(
        f"the runner did not start for {paths.root}" + (f"; the end of {paths.log}:\n{tail}" if tail else "")
    )


def _log_size(paths: StatePaths) -> int:
    try:
        return paths.log.stat().st_size
    except OSError:
        return 0


def _log_since(paths: StatePaths, offset: int) -> str:
    try:
        with open(paths.log, "rb") as f:
            f.seek(offset)
            return f.read(256 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""


def _death_reason(paths: StatePaths, offset: int) -> str:
    """What the runner wrote while starting: its reason, or the fatal error with the frame it died in."""
    text = _log_since(paths, offset)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "cannot start: " in ln:
            return f"the runner cannot start for {paths.root}: {ln.split('cannot start: ', 1)[1]}"
    fatal = [ln for ln in lines if "Fatal Python error" in ln]
    if fatal:
        frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
        where = f" in {frames[0]}" if frames else ""  # faulthandler lists the innermost frame first
        return (
            f"the runner died while starting for {paths.root}: {fatal[0].split('Fatal Python error: ', 1)[-1]}{where} "
            f"(the whole traceback is in {paths.log})"
        )
    if lines:
        return (
            f"the runner died while starting for {paths.root} without a word of why (killed with SIGKILL: "
            f"out of memory?); {paths.log} ends:\n" + "\n".join(lines[-8:])
        )
    return (
        f"the runner died while starting for {paths.root} and wrote nothing to {paths.log}: it was killed "
        "(SIGKILL: out of memory, or another user's kill?)"
    )


def ensure_running(campaign: Any, *, wait_seconds: float = 30.0) -> dict:
    """The runner's ping answer, starting it first when it is not running (the console's entry)."""
    pong = client.ping(paths_for(campaign))
    if pong:
        return pong
    up(campaign, wait_seconds=wait_seconds)
    pong = client.ping(paths_for(campaign))
    if not pong:
        raise RunnerUnavailable(f"the runner for {paths_for(campaign).root} started but does not answer")
    return pong


def is_running(campaign: Any) -> bool:
    return client.ping(paths_for(campaign)) is not None


def _process_exited(info: dict | None) -> bool:
    """The pid file's process has exited (gone, a zombie, or its pid reused by another process).

    The runner gives up its socket, pid file and lock before its last threads end; `down` waits for
    the process itself, so that what follows (`up`, a check of the pid) never meets it."""
    if not info or not isinstance(info.get("pid"), int):
        return True
    import psutil

    try:
        proc = psutil.Process(info["pid"])
        if abs(proc.create_time() - float(info.get("create_time", -1))) > 0.05:
            return True
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, TypeError, ValueError):
        return False


def _wait_gone(info: dict | None, paths: StatePaths, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_our_runner(info, paths) and not lock_is_held(paths) and _process_exited(info):
            return True
        time.sleep(0.05)
    return False


def down(campaign: Any, *, abort_runs: bool = False, timeout: float = 90.0) -> DownResult:
    """Stop the runner (runs go on unless `abort_runs`); waits until it has exited."""
    paths = paths_for(campaign)
    info = read_pid_file(paths)
    try:
        reply = client.request(paths, "down", abort_runs=abort_runs, timeout=10.0)
        asked = True
    except (RunnerUnavailable, client.RequestFailed):
        asked = False
    if asked:
        active = (reply or {}).get("active_runs") if isinstance(reply, dict) else None
        if active == []:
            what = "; no run was active"
        elif abort_runs:
            what = f"; {', '.join(active)} aborted" if active else "; its runs were aborted"
        else:
            what = "; runs go on and are re-adopted at the next `campaign up`"
        if _wait_gone(info, paths, timeout):
            return DownResult(True, info.get("pid") if info else None, "the runner stopped" + what)
        raise RunnerUnavailable(
            f"the runner (pid {info and info.get('pid')}) was asked to stop but is "
            f"still running after {timeout:g} s; see {paths.log}"
        )
    if info is None or not is_our_runner(info, paths):
        return DownResult(False, None, "the runner is not running")
    pid = info["pid"]
    os.kill(pid, signal.SIGTERM)
    if _wait_gone(info, paths, timeout):
        note = " (--abort-runs needs the socket: runs were left going)" if abort_runs else ""
        return DownResult(True, pid, f"the runner did not answer on its socket; SIGTERM stopped it{note}")
    raise RunnerUnavailable(f"the runner (pid {pid}) did not stop after SIGTERM within {timeout:g} s")
