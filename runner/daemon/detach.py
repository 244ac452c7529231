"""Will a detached runner survive the end of the SSH session? Where systemd-logind kills a login
session's processes at logout (`KillUserProcesses=yes`), a new session is not enough: the runner then
goes through `systemd-run --user`, or `campaign up` says plainly that it will not outlive the session.
The facts are gathered once (`gather_logind_facts`) and the decision is a pure function of them, so
tests give it any host's answers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LogindFacts:
    kill_user_processes: str | None  # "yes"/"no" from `loginctl show-user`, None when unknown
    logind_conf: str | None  # text of /etc/systemd/logind.conf (and drop-ins), if readable
    in_login_session: bool  # XDG_SESSION_ID set: logind tracks this process's session
    systemd_run: str | None  # path of systemd-run, when installed
    user_manager: bool  # a systemd --user manager answers (XDG_RUNTIME_DIR/systemd)


@dataclass(frozen=True)
class DetachPlan:
    how: str  # "session" (setsid + fork) or "systemd-run"
    warning: str | None  # said at `up` when the runner will not outlive the session
    reason: str


def kills_user_processes(facts: LogindFacts) -> bool:
    """loginctl's answer when it gave one, else the last uncommented setting in logind.conf
    (systemd's default is no)."""
    if facts.kill_user_processes is not None:
        return facts.kill_user_processes.strip().lower() in ("yes", "true", "1")
    value = "no"
    for line in (facts.logind_conf or "").splitlines():
        m = re.match(r"\s*KillUserProcesses\s*=\s*(\S+)", line)
        if m:
            value = m.group(1).lower()
    return value in ("yes", "true", "1", "on")


def decide_detach(facts: LogindFacts) -> DetachPlan:
    if not kills_user_processes(facts):
        return DetachPlan("session", None, "logind does not kill user processes at logout")
    if not facts.in_login_session:
        return DetachPlan("session", None, "not inside a logind session: nothing will kill it at logout")
    if facts.systemd_run and facts.user_manager:
        return DetachPlan(
            "systemd-run", None, "logind kills this session's processes at logout: running under systemd --user"
        )
    return DetachPlan(
        "session",
        (
            "systemd-logind kills this login session's processes at logout (KillUserProcesses=yes) and "
            "`systemd-run --user` is not available here: the runner will NOT outlive this SSH session. "
            "Ask the host's admin for `loginctl enable-linger` or KillUserProcesses=no, or stay logged in."
        ),
        "logind kills user processes and no systemd --user manager answers",
    )


def gather_logind_facts(env: dict[str, str] | None = None) -> LogindFacts:
    env = dict(os.environ if env is None else env)
    user = env.get("USER") or env.get("LOGNAME") or ""
    kup = None
    if shutil.which("loginctl") and user:
        try:
            out = subprocess.run(
                ["loginctl", "show-user", user, "-p", "KillUserProcesses"], capture_output=True, text=True, timeout=5
            )
            m = re.search(r"KillUserProcesses=(\S+)", out.stdout)
            if out.returncode == 0 and m:
                kup = m.group(1)
        except (OSError, subprocess.SubprocessError):
            kup = None
    conf_parts = []
    for p in [Path("/etc/systemd/logind.conf"), *sorted(Path("/etc/systemd/logind.conf.d").glob("*.conf"))]:
        try:
            conf_parts.append(p.read_text(errors="replace"))
        except OSError:
            pass
    runtime = env.get("XDG_RUNTIME_DIR")
    user_manager = bool(runtime and Path(runtime, "systemd", "private").exists())
    return LogindFacts(
        kill_user_processes=kup,
        logind_conf="\n".join(conf_parts) or None,
        in_login_session=bool(env.get("XDG_SESSION_ID")),
        systemd_run=shutil.which("systemd-run"),
        user_manager=user_manager,
    )
