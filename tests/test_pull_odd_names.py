"""`campaign pull` of a run whose files have odd names (a newline, a carriage return, spaces,
unicode, a leading dash, glob and comment characters, quotes), through a real sshd on loopback,
with rsync and with sftp, into a destination whose path has spaces and a leading dash."""

from __future__ import annotations

import sys

import pytest

from runner.cli import main
from runner.remote.pull import pull
from runner.remote.ssh import Address, CopyTool, Session
from tests.helpers_sshd import served_campaign

REMOTE = f"{sys.executable} -m runner"
NAMES = [
    "new\nline.txt",
    "cr\r.txt",
    "with space.txt",
    " lead space.txt",
    "ünïcödé.txt",
    "-leading.txt",
    "glob[1].txt",
    "star*.txt",
    "#hash.txt",
    "; semi.txt",
    "back\\slash.txt",
    'quote".txt',
    "tab\tname.txt",
]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    extra = f"\nfor name in {NAMES!r}:\n    open(os.path.join(run_dir, name), 'w').write(name)\n"
    with served_campaign(
        tmp_path_factory.mktemp("odd"), [{"name": "a", "n": 3, "delay": 0.01}], steps_extra=extra
    ) as h:
        yield h


@pytest.mark.parametrize("tool", [CopyTool.RSYNC, CopyTool.SFTP])
def test_odd_names_arrive_intact_with_either_tool(host, tmp_path, tool):
    server, c = host
    dest = tmp_path / "my laptop" / "-pulled files"
    with Session(server.alias, server.options(), remote_campaign=REMOTE) as s:
        result = pull(Address("testhost", str(c.root)), dest, s, tool=tool, say=lambda _: None, record=False)
    assert result.copy_error is None
    assert result.ok, (result.missing, result.changed)
    (run_dir,) = (dest / "runs").iterdir()
    for name in NAMES:
        assert (run_dir / name).read_bytes() == name.encode(), name


def test_the_pull_command_reports_every_file_verified(host, tmp_path, capsys):
    server, c = host
    dest = tmp_path / "lap top"
    rc = main(["pull", "-F", str(server.config), "--remote-campaign", REMOTE, f"testhost:{c.root}", str(dest)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "verified: all" in out and "the host recorded the retrieval as verified" in out
