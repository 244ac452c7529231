"""The two-host test bed itself: inbound SSH only, hosts that cannot reach each other, a campaign
folder (and so the runner's socket) reachable from here only through SSH, and a partition."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from helpers_netns import NsHosts, why_no_netns

WHY = why_no_netns()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no namespaced hosts: {WHY}")

ECHO_SERVER = (
    "import socket,sys,os\n"
    "p=sys.argv[1]\n"
    "s=socket.socket(socket.AF_UNIX); s.bind(p); s.listen(); print('ready', flush=True)\n"
    "c,_=s.accept(); c.sendall(b'hello from '+os.uname().nodename.encode()+b' '+c.recv(100))\n"
)


@pytest.fixture
def hosts(tmp_path):
    with NsHosts(tmp_path / "net") as hs:
        yield hs


def test_hosts_accept_ssh_only_and_cannot_reach_each_other(hosts):
    a, b = hosts["a"], hosts["b"]
    assert a.ssh("echo", "ok").stdout.strip() == "ok"
    with pytest.raises(OSError):  # nothing but sshd listens on the host's address
        socket.create_connection((a.address, 8080), timeout=1)
    r = a.ssh("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", b.address, "true", check=False)
    assert r.returncode != 0 and "unreachable" in r.stderr.lower()


def test_the_campaign_folder_is_private_and_its_socket_is_reached_through_ssh(hosts, tmp_path):
    a = hosts["a"]
    sock = a.dir / "runner.sock"
    server = subprocess.Popen(
        ["ssh", "-F", str(a.ssh_config), a.name, "python3", "-", str(sock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    server.stdin.write(ECHO_SERVER)
    server.stdin.close()
    try:
        assert server.stdout.readline().strip() == "ready"
        assert not sock.exists()  # the host's folder, seen from here: empty
        local = tmp_path / "fwd.sock"
        ctl = tmp_path / "ctl"
        master = ["ssh", "-F", str(a.ssh_config), "-o", f"ControlPath={ctl}"]
        subprocess.run([*master, "-o", "ControlMaster=yes", "-o", "ControlPersist=30", "-fN", a.name], check=True)
        subprocess.run([*master, "-O", "forward", "-L", f"{local}:{sock}", a.name], check=True, capture_output=True)
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(local))
            c.sendall(b"ping")
            c.settimeout(5)
            assert c.recv(100).startswith(b"hello from ")
        subprocess.run([*master, "-O", "exit", a.name], capture_output=True)
    finally:
        server.kill()
        server.wait()


def test_a_partition_cuts_the_host_off_and_heal_restores_it(hosts):
    a = hosts["a"]
    a.partition()
    t0 = time.monotonic()
    assert a.ssh("true", check=False, timeout=15).returncode == 255
    assert time.monotonic() - t0 < 10
    a.heal()
    assert a.ssh("echo", "back").stdout.strip() == "back"
