"""A real OpenSSH server on 127.0.0.1:<free port> for the transport tests: its own host key, a
throwaway client key, its own config in a temporary folder, run as the test's own user. Tests that
need it skip (saying why) only where `sshd` is not installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SSHD_PATHS = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")


def find_sshd() -> str | None:
    return next((p for p in SSHD_PATHS if os.access(p, os.X_OK)), None) or shutil.which("sshd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SshServer:
    alias: str  # a Host of `config`
    config: Path  # the client's ssh config (`ssh -F`)
    port: int
    proc: subprocess.Popen
    env_path: str  # PATH the remote commands see (set through the client config: SetEnv needs AcceptEnv)

    def options(self) -> list[str]:
        return ["-F", str(self.config)]


def start_sshd(base: Path, *, path_dirs: list[str] | None = None, path: str | None = None) -> SshServer:
    """`path`: the remote commands' whole PATH (e.g. one without rsync), else `path_dirs` + the usual."""
    sshd = find_sshd()
    if sshd is None:
        pytest.skip("sshd is not installed (apt-get install openssh-server): no real ssh server to test against")
    if shutil.which("ssh") is None:
        pytest.skip("the OpenSSH client is not installed (apt-get install openssh-client)")
    base.mkdir(parents=True, exist_ok=True)
    host_key, user_key = base / "host_ed25519", base / "id_ed25519"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    auth = base / "authorized_keys"
    auth.write_text(user_key.with_suffix(".pub").read_text())
    auth.chmod(0o600)
    port = free_port()
    path_value = path if path is not None else ":".join([*(path_dirs or []), "/usr/local/bin", "/usr/bin", "/bin"])
    cfg = base / "sshd_config"
    cfg.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {base / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {auth}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n"
        f"Subsystem sftp internal-sftp\nSetEnv PATH={path_value}\nLogLevel ERROR\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder, when root
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(cfg)], stderr=open(base / "sshd.log", "wb"))
    client = base / "ssh_config"
    client.write_text(
        f"Host testhost\n  HostName 127.0.0.1\n  Port {port}\n  User {_user()}\n  IdentityFile {user_key}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {base / 'known_hosts'}\n  StrictHostKeyChecking no\n"
        "  LogLevel ERROR\n  BatchMode yes\n"
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited: {(base / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.05)
    return SshServer("testhost", client, port, proc, path_value)


def stop_sshd(server: SshServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()


def _user() -> str:
    import getpass

    return getpass.getuser()


@contextmanager
def served_campaign(
    base: Path, variants: list[dict], *, until: str = "finished", steps_extra: str = ""
) -> Iterator[tuple[SshServer, Any]]:
    """sshd on loopback and a real runner (one slot) on a campaign of `variants` under `base`, once
    a run is `until` ("finished": and listed in the output manifest; or "running"); `steps_extra`
    is appended to the runs' script. Both stopped, and every process under `base` killed, after."""
    from runner.campaign.model import load_campaign
    from runner.daemon import client, control
    from tests.helpers_runner import kill_processes_under, wait_for, write_campaign

    server = start_sshd(base / "sshd")
    mp = pytest.MonkeyPatch()
    mp.setenv("CAMPAIGN_SLOTS", "1")
    root = base / "camp"
    write_campaign(root, variants)
    if steps_extra:
        script = root / "steps.py"
        script.write_text(script.read_text() + steps_extra)
    c = load_campaign(root)
    control.up(c)
    try:
        wait_for(lambda: any(r["state"] == until for r in client.request(c, "status")["runs"]), 30, f"a run {until}")
        if until == "finished":
            manifest = c.output_path / "manifest.toml"
            wait_for(lambda: manifest.exists() and "runs/" in manifest.read_text(), 30, "the run in the manifest")
        yield server, c
    finally:
        try:
            control.down(c, abort_runs=True, timeout=30)
        except Exception:  # already down: the clean-up goes on
            pass
        stop_sshd(server)
        kill_processes_under(base)
        mp.undo()
