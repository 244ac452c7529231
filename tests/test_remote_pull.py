"""`campaign pull` against a real sshd on loopback with a throwaway key: rsync and sftp, resume,
a file changed on the host after the manifest, the tool found in the host's virtualenv, and the
verified retrieval recorded on the host (status --json)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.cli import main
from runner.remote.pull import STATE_FILE, pull
from runner.remote.ssh import Address, CopyTool, RemoteError, Session
from tests.helpers_runner import write_campaign
from tests.helpers_sshd import served_campaign, start_sshd, stop_sshd

REMOTE = f"{sys.executable} -m runner"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """sshd plus a campaign whose one run has finished and whose output folder is written."""
    with served_campaign(tmp_path_factory.mktemp("pull"), [{"name": "a", "n": 8, "delay": 0.01}]) as h:
        yield h


def session(server) -> Session:
    return Session(server.alias, server.options(), remote_campaign=REMOTE)


def tree(dest: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(dest).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in dest.rglob("*")
        if p.is_file() and p.name != STATE_FILE
    }


def test_address_parsing():
    assert Address.parse("me@gpu:camp") == Address("me@gpu", "camp")
    assert Address.parse("gpu:/abs/camp").path == "/abs/camp"
    assert Address.parse("[me@::1]:camp") == Address("me@::1", "camp")
    for bad in ("nohost", ":camp", "me@:camp"):
        with pytest.raises(ValueError):
            Address.parse(bad)


def test_pull_with_rsync_verifies_and_the_host_records_it(host, tmp_path, capsys):
    server, c = host
    dest = tmp_path / "laptop"
    rc = main(["pull", "-F", str(server.config), "--remote-campaign", REMOTE, f"testhost:{c.root}", str(dest)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "copying" in out and "with rsync" in out
    assert "verified: all" in out and "the host recorded the retrieval as verified" in out
    assert (dest / "deliverables" / "manifest.toml").read_bytes() == (c.output_path / "manifest.toml").read_bytes()
    listed = json.loads((dest / STATE_FILE).read_text())["list"]["files"]
    assert listed and all((dest / e["path"]).is_file() for e in listed)
    assert any(e["path"].startswith("runs/") and e["kind"] == "records" for e in listed)
    assert main(["status", str(c.root), "--json"]) == 0
    snap = json.loads(capsys.readouterr().out)
    retrieval = snap["retrieval"]
    assert retrieval["files"] == len(listed) and retrieval["bytes"] == sum(e["bytes"] for e in listed)
    assert "@" in retrieval["to"] and retrieval["dest"] == str(dest.resolve())
    assert main(["status", str(c.root)]) == 0
    assert "retrieved and verified" in capsys.readouterr().out


def test_pull_with_sftp_resumes_without_copying_finished_files(host, tmp_path):
    server, c = host
    dest = tmp_path / "laptop"
    with session(server) as s:
        first = pull(Address("testhost", str(c.root)), dest, s, tool=CopyTool.SFTP, say=lambda _: None, record=False)
    assert first.ok and first.tool is CopyTool.SFTP and not first.skipped
    before = tree(dest)
    # an interrupted copy: one file never arrived, another stopped half way
    gone = sorted(before)[0]
    torn = max((rel for rel in before if rel != gone), key=lambda rel: (dest / rel).stat().st_size)
    (dest / gone).unlink()
    data = (dest / torn).read_bytes()
    (dest / torn).write_bytes(data[: len(data) // 2])
    with session(server) as s:
        second = pull(Address("testhost", str(c.root)), dest, s, tool=CopyTool.SFTP, say=lambda _: None, record=False)
    assert second.ok
    assert sorted(second.copied) == sorted({gone, torn})
    after = tree(dest)
    for rel, stamp in before.items():
        if rel not in (gone, torn):
            assert after[rel] == stamp, f"{rel} was copied again"


def test_a_file_changed_on_the_host_after_the_manifest_is_reported(host, tmp_path, capsys):
    server, c = host
    changed = next(p for p in sorted(c.output_path.rglob("metrics.jsonl")))
    original = changed.read_bytes()
    try:
        changed.write_bytes(original + b'{"step": 999, "loss": 0.1}\n')
        dest = tmp_path / "laptop"
        rc = main(["pull", "-F", str(server.config), "--remote-campaign", REMOTE, f"testhost:{c.root}", str(dest)])
        out = capsys.readouterr().out
    finally:
        changed.write_bytes(original)
    assert rc == 1
    rel = changed.relative_to(c.root).as_posix()
    assert f"CHANGED  {rel}" in out
    assert "NOT verified: 0 missing, 1 changed" in out


def test_the_tool_is_found_in_the_campaign_folders_virtualenv(host, tmp_path):
    server, c = host
    venv_bin = c.root / ".venv" / "bin"
    venv_bin.mkdir(parents=True, exist_ok=True)
    shim = venv_bin / "campaign"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m runner "$@"\n')
    shim.chmod(0o755)
    try:
        with Session(server.alias, server.options()) as s:
            assert s.find_campaign(str(c.root)) == [str(shim)]
            listing = json.loads(s.campaign(["retrieval", str(c.root), "--json"], str(c.root)))
        assert listing["root"] == str(c.root.resolve())
        with Session(server.alias, server.options()) as s, pytest.raises(RemoteError, match="--remote-campaign"):
            s.find_campaign(str(tmp_path / "elsewhere"))
    finally:
        shim.unlink()


def test_an_unreachable_host_is_a_plain_error(tmp_path, capsys):
    cfg = tmp_path / "cfg"
    cfg.write_text("Host nowhere\n  HostName 127.0.0.1\n  Port 1\n  BatchMode yes\n  ConnectTimeout 3\n")
    rc = main(["pull", "-F", str(cfg), "nowhere:camp", str(tmp_path / "d")])
    assert rc == 1
    assert "cannot reach nowhere over ssh" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "d" / STATE_FILE)


def test_without_rsync_on_the_host_the_copy_falls_back_to_sftp(host, tmp_path):
    _, c = host
    bare = start_sshd(tmp_path / "sshd-bare", path=str(tmp_path / "empty-bin"))  # no rsync on its PATH
    try:
        with session(bare) as s:
            assert not s.has("rsync")
            assert s.copy_tool() is CopyTool.SFTP
            result = pull(Address("testhost", str(c.root)), tmp_path / "d", s, say=lambda _: None, record=False)
        assert result.ok and result.tool is CopyTool.SFTP and result.copied
    finally:
        stop_sshd(bare)


def test_the_list_takes_a_checkpoints_sha256_from_its_sidecar_and_a_torn_copy_shows(tmp_path):
    import hashlib

    from runner.closing.retrieval import HashFrom, Kind, build_list
    from runner.ledger import store as L

    root = tmp_path / "c"
    write_campaign(root, [{"name": "a"}])
    c = load_campaign(root)
    run_dir = root / "runs" / "a-00000001"
    (run_dir / "checkpoints").mkdir(parents=True)
    ckpt = run_dir / "checkpoints" / "ckpt-000000010.pt"
    ckpt.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    (ckpt.with_suffix(".json")).write_text(json.dumps({"step": 10, "bytes": ckpt.stat().st_size, "sha256": digest}))
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    ledger = L.Ledger(c.state_dir / "ledger.sqlite")
    ledger.insert_run(
        {"id": "a-00000001", "variant": "a", "category": "essential", "config_hash": "00000001",
         "state": "stopped", "run_dir": str(run_dir), "planned_hours": 1.0}
    )  # fmt: skip
    ledger.upsert_checkpoint("a-00000001", str(ckpt), step=10, verified=1, grade="weights")
    listing = build_list(c, ledger.conn)
    ledger.close()
    by_path = {e.path: e for e in listing.files}
    entry = by_path["runs/a-00000001/checkpoints/ckpt-000000010.pt"]
    assert entry.kind is Kind.CHECKPOINT and entry.hash_from is HashFrom.SIDECAR and entry.sha256 == digest
    assert by_path["runs/a-00000001/metrics.jsonl"].kind is Kind.RECORDS
    # rewritten in place after the sidecar (same size, other bytes): the list keeps the sidecar's hash,
    # so the copy arrives as changed instead of passing
    ckpt.write_bytes(b"WEIGHTS" * 1000)
    ledger = L.Ledger(c.state_dir / "ledger.sqlite")
    assert {e.path: e for e in build_list(c, ledger.conn).files}[entry.path].sha256 == digest
    ledger.close()
