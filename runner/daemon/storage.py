"""What the campaign folder's file system can hold, tried before the runner relies on it.

Some file systems take ordinary files but not what the runner needs besides: FUSE mounts such as
sshfs answer ENOSYS to creating a Unix socket; others have no working locks (an NFS without lock
manager) or no shared memory maps (SQLite's WAL mode maps `ledger.sqlite-shm`; where that fails
the process dies of SIGBUS, with no Python traceback). Each is tried once, at runner start, in a
child process (`python -m runner.daemon.storage DIR`), so that such a death is the probe's, not the
runner's. What cannot live in the folder moves, and runner.log and `status` say so: the socket to
a short private path (runner.daemon.server), the ledger from WAL to a rollback journal. A folder
that cannot hold a lockable SQLite file at all is refused with the reason (docs/INTERNALS.md).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runner.ledger.journal_probe import Journal, try_journal

PROBE_TIMEOUT = 30.0
EVERYTHING_HERE = "everything in the campaign folder"
LOCAL_DISK = "put the campaign folder on a local file system (copy it back with `campaign pull` or rsync)"


@dataclass
class Storage:
    """The probe's findings for one folder: what works, what moved, and why."""

    folder: Path
    journal: Journal | None = Journal.WAL  # None: the ledger cannot be kept there at all
    notes: list[str] = field(default_factory=list)  # what moved and why (runner.log, status)
    refusal: str | None = None  # why the runner cannot start on this folder

    def describe(self) -> str:
        return "; ".join(self.notes) if self.notes else EVERYTHING_HERE


def _try(fn) -> str | None:  # noqa: ANN001  # a probe step; its error as text, None when it worked
    try:
        fn()
        return None
    except (OSError, sqlite3.Error) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            return f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror or exc}"
        return f"{type(exc).__name__}: {exc}"


def _socket(folder: Path) -> None:
    path = folder / f".probe-{os.getpid()}.sock"
    if len(os.fsencode(path)) > 107:
        return  # too long to try: the server's own fallback handles path length
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(path))
    finally:
        s.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _locks(folder: Path) -> None:
    path = folder / f".probe-{os.getpid()}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # POSIX locks: what SQLite uses
        fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
        os.unlink(path)


def _probe_main(folder: Path) -> int:
    """In the child: each step's error (or null), as one JSON line, printed as it goes so that a
    step that kills the child (SIGBUS) is known by the last line."""
    for name, step in (
        ("socket", lambda: _socket(folder)),
        ("locks", lambda: _locks(folder)),
        ("sqlite_delete", lambda: try_journal(folder, Journal.DELETE)),
        ("sqlite_wal", lambda: try_journal(folder, Journal.WAL)),
    ):
        print(json.dumps({"step": name}), flush=True)
        print(json.dumps({"step": name, "error": _try(step)}), flush=True)
    return 0


def probe(folder: Path) -> Storage:
    """Run the probe in a child process and decide what moves."""
    found: dict[str, str | None] = {}
    last: str | None = None
    try:
        res = subprocess.run(
            [sys.executable, "-m", "runner.daemon.storage", str(folder)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            env={**os.environ, "PYTHONFAULTHANDLER": ""},
        )
        out, rc = res.stdout, res.returncode
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        out, rc = raw.decode(errors="replace") if isinstance(raw, bytes) else raw, None
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "error" in rec:
            found[rec["step"]] = rec["error"]
        last = rec.get("step", last)
    if last is not None and last not in found:  # the child died in this step
        if rc is None:
            found[last] = f"did not finish within {PROBE_TIMEOUT:g} s"
        elif rc < 0:
            found[last] = f"the process died of {signal.Signals(-rc).name}"
        else:
            found[last] = f"the process ended with {rc}"
    return decide(folder, found)


def decide(folder: Path, found: dict[str, str | None]) -> Storage:
    st = Storage(folder)
    if found.get("socket"):
        st.notes.append(f"socket: elsewhere (a socket cannot be created in {folder}: {found['socket']})")
    if found.get("locks"):
        st.notes.append(f"locks: POSIX locks fail in {folder} ({found['locks']})")
    if not found.get("sqlite_wal"):
        return st
    if not found.get("sqlite_delete"):
        st.journal = Journal.DELETE
        st.notes.append(
            f"ledger: a rollback journal instead of WAL (WAL's shared memory fails in {folder}: {found['sqlite_wal']})"
        )
        return st
    st.journal = None
    why = (
        f"POSIX locks fail there ({found['locks']}) and SQLite needs them"
        if found.get("locks")
        else f"SQLite fails there with WAL ({found['sqlite_wal']}) and with a rollback journal ({found['sqlite_delete']})"
    )
    st.refusal = f"the ledger cannot be kept in {folder}: {why}; {LOCAL_DISK}"
    return st


if __name__ == "__main__":
    sys.exit(_probe_main(Path(sys.argv[1])))
