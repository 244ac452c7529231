"""Rented hosts in miniature: each "host" is a network namespace with its own sshd.

Each host gets a veth link to this machine and an address of its own; only its sshd listens
there (inbound SSH only), and the hosts have no route to each other. Its campaign folder is a
tmpfs mounted in a private mount namespace that the sshd (and every session it starts) lives in,
so the runner's Unix socket there is reachable from here only by SSH forwarding, as on a rented
host. `partition()` takes a host's link down, `heal()` brings it back.

Needs root, `ip` (iproute2) and `sshd` (openssh-server): `.ci/run` installs them; elsewhere the
tests skip, saying which is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SFTP_SERVER = next(
    (p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server") if os.path.exists(p)),
    "internal-sftp",
)


def why_no_netns() -> str | None:
    """Why namespaced hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, pkg in (("ip", "iproute2"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"no `{tool}` here (install {pkg})"
    if not os.access(SSHD, os.X_OK):
        return "no sshd here (install openssh-server)"
    if shutil.which("unshare") is None:
        return "no `unshare` here (install util-linux)"
    probe = f"ccprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot add a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


@dataclass
class NsHost:
    name: str  # also the ssh alias in the shared ssh config
    netns: str
    link: str  # the veth end on this machine
    address: str
    dir: Path  # the campaign folder on the host (private to its mount namespace)
    root: Path  # this host's sshd files, on this machine
    ssh_config: Path
    sshd: subprocess.Popen | None = field(default=None, repr=False)

    def ssh(self, *command: str, timeout: float = 20, check: bool = True) -> subprocess.CompletedProcess:
        """One command on the host, over its own connection (no ControlMaster)."""
        r = subprocess.run(
            [
                "ssh",
                "-F",
                str(self.ssh_config),
                "-o",
                "ControlMaster=no",
                "-o",
                "ControlPath=none",
                self.name,
                *command,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"ssh {self.name} {' '.join(command)}: rc {r.returncode}: {r.stderr.strip()}")
        return r

    def partition(self) -> None:
        """The link goes down: SSH to this host hangs until `heal`."""
        _run("ip", "link", "set", self.link, "down")

    def heal(self) -> None:
        _run("ip", "link", "set", self.link, "up")
        _run("ip", "netns", "exec", self.netns, "ip", "link", "set", f"{self.link}p", "up")


class NsHosts:
    """Namespaced hosts and one ssh config naming them; a context manager that removes them all."""

    def __init__(self, base: Path, names: tuple[str, ...] = ("a", "b")) -> None:
        self.base = base
        self.names = names
        self.hosts: dict[str, NsHost] = {}
        tag = os.getpid() % 100000
        self._tag = tag
        self._net = 200 + tag % 50
        self.ssh_config = base / "ssh_config"
        self.key = base / "id_ed25519"

    def __enter__(self) -> NsHosts:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, name: str) -> NsHost:
        return self.hosts[name]

    def _start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        known: list[str] = []
        config: list[str] = []
        for n, name in enumerate(self.names):
            root = self.base / f"host-{name}"
            root.mkdir()
            host = NsHost(
                name=name,
                netns=f"cc{self._tag}{name}",
                link=f"cc{self._tag}{name}",
                address=f"10.{self._net}.{(self._tag // 50) % 250}.{4 * n + 2}",
                dir=root / "srv",
                root=root,
                ssh_config=self.ssh_config,
            )
            host.dir.mkdir()
            self.hosts[name] = host
            _run("ip", "netns", "add", host.netns)
            _run("ip", "link", "add", host.link, "type", "veth", "peer", "name", f"{host.link}p")
            _run("ip", "link", "set", f"{host.link}p", "netns", host.netns)
            near = host.address.rsplit(".", 1)[0] + f".{4 * n + 1}"
            _run("ip", "addr", "add", f"{near}/30", "dev", host.link)
            _run("ip", "link", "set", host.link, "up")
            ns = ("ip", "netns", "exec", host.netns)
            _run(*ns, "ip", "addr", "add", f"{host.address}/30", "dev", f"{host.link}p")
            _run(*ns, "ip", "link", "set", f"{host.link}p", "up")
            _run(*ns, "ip", "link", "set", "lo", "up")
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_key"))
            (root / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
            (root / "sshd_config").write_text(
                "\n".join(
                    [
                        f"ListenAddress {host.address}",
                        "Port 22",
                        f"HostKey {root / 'host_key'}",
                        f"AuthorizedKeysFile {root / 'authorized_keys'}",
                        f"PidFile {root / 'sshd.pid'}",
                        "PubkeyAuthentication yes",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "PermitRootLogin prohibit-password",
                        "StrictModes no",
                        "UsePAM no",
                        "AllowTcpForwarding yes",
                        "AllowStreamLocalForwarding yes",
                        "StreamLocalBindUnlink yes",
                        "ClientAliveInterval 2",
                        "ClientAliveCountMax 3",
                        f"Subsystem sftp {SFTP_SERVER}",
                        "LogLevel ERROR",
                        "",
                    ]
                )
            )
            # The campaign folder: a tmpfs in a mount namespace that only this sshd's sessions share.
            host.sshd = subprocess.Popen(
                [
                    *ns,
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    'mount -t tmpfs -o size=256m,mode=0755 ccsrv "$1" && exec "$2" -D -e -f "$3"',
                    "sh",
                    str(host.dir),
                    SSHD,
                    str(root / "sshd_config"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(root / "sshd.log", "w"),  # noqa: SIM115 - the sshd's log, closed with the process
            )
            pub = (root / "host_key.pub").read_text().split()
            known.append(f"{host.address} {pub[0]} {pub[1]}")
            config += [
                f"Host {name}",
                f"  HostName {host.address}",
                "  User root",
                f"  IdentityFile {self.key}",
                "  IdentitiesOnly yes",
                "  BatchMode yes",
                "  StrictHostKeyChecking yes",
                f"  UserKnownHostsFile {self.base / 'known_hosts'}",
                "  ConnectTimeout 3",
                "  ServerAliveInterval 1",
                "  ServerAliveCountMax 3",
                "  LogLevel ERROR",
                "",
            ]
        (self.base / "known_hosts").write_text("\n".join(known) + "\n")
        self.ssh_config.write_text("\n".join(config))
        for host in self.hosts.values():
            self._wait_listening(host)

    def _wait_listening(self, host: NsHost, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if host.sshd is not None and host.sshd.poll() is not None:
                log = (host.root / "sshd.log").read_text()
                raise RuntimeError(f"sshd of host {host.name} exited: {log.strip()}")
            try:
                with socket.create_connection((host.address, 22), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd of host {host.name} not listening on {host.address}:22")

    def close(self) -> None:
        """Stop every process left in each namespace (sshd and its sessions), then remove it."""
        for host in self.hosts.values():
            pids = _run("ip", "netns", "pids", host.netns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            if host.sshd is not None:
                try:
                    host.sshd.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            _run("ip", "link", "del", host.link, check=False)
            _run("ip", "netns", "del", host.netns, check=False)
