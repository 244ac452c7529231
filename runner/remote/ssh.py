"""The OpenSSH transport: one ControlMaster connection per host, remote `campaign` commands, copies.

Everything goes through the system's `ssh`, `rsync` and `sftp`, so `~/.ssh/config`, keys, agents,
ports and jump hosts work as they do in the user's own shell. The first command opens a master
connection (ControlMaster); every later command, rsync and sftp included, rides on it, so a
password or a key's passphrase is asked once. The tool is found on the host even where it lives in
a virtualenv that a non-interactive SSH command does not activate.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

CONNECT_TIMEOUT_S = 20
CONTROL_PERSIST_S = 120
# Where `campaign` may live on the host when it is not on a non-interactive shell's PATH, tried in
# order after `campaign` itself ({dir} is the campaign folder on the host).
CANDIDATES = (
    "campaign",
    "$HOME/.local/bin/campaign",
    "{dir}/.venv/bin/campaign",
    "{dir}/venv/bin/campaign",
    "{dir}/../.venv/bin/campaign",
    "$HOME/.venv/bin/campaign",
    "$HOME/venv/bin/campaign",
    "$HOME/campaign-console/.venv/bin/campaign",
    "/opt/conda/bin/campaign",
    "$HOME/miniconda3/bin/campaign",
    "$HOME/anaconda3/bin/campaign",
)


class RemoteError(Exception):
    """The host could not be reached, or a command there failed (the message says which and why)."""


class CopyTool(Enum):
    RSYNC = "rsync"
    SFTP = "sftp"


@dataclass(frozen=True)
class Address:
    """`[USER@]HOST:DIR` as given on the command line."""

    host: str  # `user@host` or `host` (an alias of ~/.ssh/config works)
    path: str  # the folder on the host ("" means the login folder)

    @classmethod
    def parse(cls, text: str) -> Address:
        host, sep, path = text.partition(":")
        if host.startswith("["):  # [user@]host in brackets, for an IPv6 address: [::1]:dir
            end = text.find("]:")
            if end < 0:
                raise ValueError(f"{text!r}: expected [USER@]HOST:DIR")
            host, sep, path = text[1:end], ":", text[end + 2 :]
        if not sep or not host or host.endswith("@"):
            raise ValueError(f"{text!r}: expected [USER@]HOST:DIR (the campaign folder on the host)")
        return cls(host, path)

    @property
    def machine(self) -> str:
        return self.host.rsplit("@", 1)[-1]


@dataclass
class Session:
    """One host, one master connection. Use as a context manager; `close()` ends the master.

    `options` are extra arguments for every ssh/sftp call (`-F FILE`, `-o Key=Value`, `-p PORT`,
    `-i KEY`); `remote_campaign` overrides the search for the tool on the host."""

    host: str
    options: Sequence[str] = ()
    remote_campaign: str | None = None
    _control_dir: str = field(default="", init=False)
    _campaign_argv: list[str] | None = field(default=None, init=False)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the master connection ---------------------------------------------------------------------
    @property
    def control_path(self) -> str:
        if not self._control_dir:
            # Unix socket paths are short (108 bytes): a short folder of our own, `%C` a hash of the target
            self._control_dir = tempfile.mkdtemp(prefix="cc-ssh-", dir="/tmp" if os.path.isdir("/tmp") else None)
        return os.path.join(self._control_dir, "%C")

    def ssh_options(self) -> list[str]:
        """The options every ssh-speaking program gets: the user's, then the shared connection."""
        return [
            *self.options,
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control_path}",
            "-o",
            f"ControlPersist={CONTROL_PERSIST_S}",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        ]

    def ssh_command(self) -> list[str]:
        """`ssh` with the options, without the host (what rsync's `-e` wants)."""
        return ["ssh", *self.ssh_options()]

    def close(self) -> None:
        if not self._control_dir:
            return
        subprocess.run(
            ["ssh", *self.ssh_options(), "-O", "exit", self.host],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=15,
            check=False,
        )
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = ""

    # -- commands ---------------------------------------------------------------------------------
    def run(
        self, argv: Sequence[str] | str, *, input: bytes | None = None, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run a command on the host (a list is quoted for the remote shell; a string is sent as is)."""
        command = argv if isinstance(argv, str) else shlex.join(argv)
        full = ["ssh", *self.ssh_options(), self.host, "--", command]
        try:
            proc = subprocess.run(
                full,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            raise RemoteError("`ssh` is not installed on this machine (the OpenSSH client is needed)") from None
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.host}: `{command}` did not finish within {timeout:g} s") from None
        if proc.returncode == 255:
            raise RemoteError(f"cannot reach {self.host} over ssh: {_last_line(proc.stderr) or 'ssh failed'}")
        if check and proc.returncode != 0:
            raise RemoteError(
                f"{self.host}: `{command}` exited {proc.returncode}: {_last_line(proc.stderr) or 'no message'}"
            )
        return proc

    def has(self, program: str) -> bool:
        """Whether `program` is on the host's PATH for a non-interactive command."""
        return self.run(f"command -v {shlex.quote(program)} >/dev/null 2>&1", check=False).returncode == 0

    def find_campaign(self, folder: str = "") -> list[str]:
        """The argv prefix that runs `campaign` on the host; RemoteError naming what was tried."""
        if self._campaign_argv is not None:
            return self._campaign_argv
        if self.remote_campaign:
            self._campaign_argv = shlex.split(self.remote_campaign)
            return self._campaign_argv
        folder = folder.rstrip("/") or "."
        tried = [c.replace("{dir}", folder) for c in CANDIDATES]
        # each candidate is expanded by the remote shell ($HOME), the folder quoted as given
        words = " ".join(_sh_word(c, folder) for c in CANDIDATES)
        probe = (
            f"for c in {words}; do "
            'if command -v "$c" >/dev/null 2>&1; then command -v "$c"; exit 0; fi; '
            'if [ -x "$c" ]; then echo "$c"; exit 0; fi; '
            "done; exit 127"
        )
        proc = self.run(probe, check=False, timeout=60)
        found = proc.stdout.decode("utf-8", "replace").strip().splitlines()
        if proc.returncode != 0 or not found:
            raise RemoteError(
                f"`campaign` was not found on {self.host} (tried: {', '.join(tried)}); "
                "name it with --remote-campaign 'PATH/TO/campaign' (or 'python -m runner')"
            )
        self._campaign_argv = [found[-1]]
        return self._campaign_argv

    def campaign(self, args: Sequence[str], folder: str = "", *, timeout: float = 600) -> bytes:
        """Run `campaign ARGS` on the host; its stdout (RemoteError with its stderr when it fails)."""
        argv = [*self.find_campaign(folder), *args]
        return self.run(argv, timeout=timeout).stdout

    # -- copies -----------------------------------------------------------------------------------
    def copy_tool(self) -> CopyTool:
        """rsync when both ends have it, else sftp (part of every OpenSSH install)."""
        if shutil.which("rsync") and self.has("rsync"):
            return CopyTool.RSYNC
        return CopyTool.SFTP

    def fetch(
        self,
        remote_root: str,
        paths: Sequence[str],
        dest: Path,
        *,
        tool: CopyTool | None = None,
        timeout: float = 86400,
    ) -> CopyTool:
        """Copy `paths` (relative to `remote_root` on the host) under `dest`, layout kept."""
        tool = tool or self.copy_tool()
        if not paths:
            return tool
        dest.mkdir(parents=True, exist_ok=True)
        if tool is CopyTool.RSYNC:
            self._rsync(remote_root, paths, dest, timeout)
        else:
            self._sftp(remote_root, paths, dest, timeout)
        return tool

    def _rsync(self, remote_root: str, paths: Sequence[str], dest: Path, timeout: float) -> None:
        # NUL-separated: a name may hold a newline or a carriage return (rsync splits lines on both)
        with tempfile.NamedTemporaryFile("wb", prefix="cc-pull-", suffix=".list", delete=False) as fh:
            fh.write(b"".join(os.fsencode(p) + b"\0" for p in paths))
            listing = fh.name
        try:
            cmd = [
                "rsync",
                "--archive",
                "--ignore-times",  # only files found wrong are listed: copy each of them
                "--partial",
                "--protect-args",
                "--from0",
                f"--files-from={listing}",
                "-e",
                shlex.join(self.ssh_command()),
                f"{self.host}:{remote_root.rstrip('/')}/",
                f"{dest}/",
            ]
            _run_local(cmd, timeout, "rsync")
        finally:
            os.unlink(listing)

    def _sftp(self, remote_root: str, paths: Sequence[str], dest: Path, timeout: float) -> None:
        lines = []
        for rel in paths:
            local = dest / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            remote = remote_root.rstrip("/") + "/" + rel
            if "\n" in remote + str(local) or "\r" in remote + str(local):
                self._cat(remote, local, timeout)  # sftp's batch is line-based: no quoting carries these
                continue
            lines.append(f"get -p {_sftp_quote(remote)} {_sftp_quote(str(local))}")
        if not lines:
            return
        batch = "\n".join(lines) + "\n"
        with tempfile.NamedTemporaryFile("w", prefix="cc-pull-", suffix=".sftp", delete=False) as fh:
            fh.write(batch)
            batch_file = fh.name
        try:
            _run_local(["sftp", *self.ssh_options(), "-b", batch_file, self.host], timeout, "sftp")
        finally:
            os.unlink(batch_file)

    def _cat(self, remote: str, local: Path, timeout: float) -> None:
        """One file through `cat` on the shared connection, written beside its place, then renamed."""
        part = local.with_name(local.name + ".part")
        cmd = ["ssh", *self.ssh_options(), self.host, "--", shlex.join(["cat", "--", remote])]
        try:
            with open(part, "wb") as out:
                proc = subprocess.run(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, timeout=timeout, check=False
                )
        except subprocess.TimeoutExpired:
            raise RemoteError(f"copying {remote!r} did not finish within {timeout:g} s") from None
        if proc.returncode != 0:
            part.unlink(missing_ok=True)
            raise RemoteError(f"copying {remote!r} failed (exit {proc.returncode}): {_last_line(proc.stderr)}")
        os.replace(part, local)


def _sh_word(candidate: str, folder: str) -> str:
    """A candidate as a word of the remote shell: `$HOME` expanded there, the folder quoted."""
    if "{dir}" in candidate:
        head, tail = candidate.split("{dir}", 1)
        if folder == "~" or folder.startswith("~/"):  # the remote shell expands ~, but not quoted
            return head + '"$HOME"' + shlex.quote(folder[1:] or "/") + tail
        return head + shlex.quote(folder) + tail
    return candidate


def _sftp_quote(path: str) -> str:
    """sftp's batch syntax: double quotes, with `\\` and `"` escaped."""
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _last_line(data: bytes) -> str:
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _run_local(cmd: list[str], timeout: float, name: str) -> None:
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise RemoteError(f"`{name}` is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise RemoteError(f"{name} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise RemoteError(f"{name} failed (exit {proc.returncode}): {_last_line(proc.stderr) or 'no message'}")
