"""The verified copy of an in-place checkpoint: a kill during the script's own save must not take
the only resume point with it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.statedir import paths_for
from runner.daemon import client, control
from runner.ledger import store as L
from runner.supervision import kept_copy
from tests.helpers_runner import kill_processes_under, run_of, wait_for, write_campaign


def test_restore_puts_back_the_verified_version_and_keeps_the_broken_one(tmp_path):
    root, run_dir = tmp_path, tmp_path / "runs" / "a-1"
    original = root / "out" / "ckpt.pt"
    original.parent.mkdir(parents=True)
    original.write_bytes(b"good" * 100)
    cand, sig = kept_copy.snapshot(original, run_dir, root)
    kept = kept_copy.keep(cand, original, sig, 120, time.time())
    # kept under its own name (the grader recognises formats by content and name, never `*.candidate`)
    assert kept.read_bytes() == b"good" * 100 and kept.name == "ckpt.pt" and kept.parent.name == "out__ckpt.pt"
    assert kept_copy.restore_if_needed(run_dir) is None  # unchanged: nothing to do
    original.write_bytes(b"trunc")  # killed mid-save
    done = kept_copy.restore_if_needed(run_dir)
    assert done["step"] == 120 and original.read_bytes() == b"good" * 100
    assert Path(done["moved_aside"]).read_bytes() == b"trunc"  # nothing is deleted
    original.unlink()
    assert kept_copy.restore_if_needed(run_dir)["moved_aside"] is None and original.exists()


def test_a_newer_verified_copy_replaces_the_older_one(tmp_path):
    run_dir = tmp_path / "runs" / "a-1"
    for i, name in enumerate(("ckpt-1.pt", "ckpt-2.pt")):
        f = tmp_path / name
        f.write_bytes(bytes([i]) * 10)
        cand, sig = kept_copy.snapshot(f, run_dir, tmp_path)
        kept_copy.keep(cand, f, sig, i, time.time())
    files = sorted(p.name for p in kept_copy.kept_dir(run_dir).iterdir())
    assert files == ["ckpt-2.pt", "kept.json"]


def test_the_newest_verified_step_is_kept_whatever_order_gradings_finish(tmp_path):
    """Regression: the kept copy was the last graded in name order (checkpoint-100 before -20)."""
    run_dir = tmp_path / "runs" / "a-1"
    for step in (100, 20):
        folder = tmp_path / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(bytes([step]) * 10)
        cand, sig = kept_copy.snapshot(folder, run_dir, tmp_path)
        assert cand.is_dir() and cand.name == f"checkpoint-{step}"
        kept_copy.keep(cand, folder, sig, step, time.time())
    assert kept_copy.kept_step(run_dir) == 100
    assert not any(p.name.endswith(".candidate") for p in kept_copy.kept_dir(run_dir).iterdir())


def test_a_folder_checkpoint_is_restored_whole(tmp_path):
    run_dir = tmp_path / "runs" / "a-1"
    folder = tmp_path / "out" / "checkpoint-10"
    folder.mkdir(parents=True)
    (folder / "optimizer.pt").write_bytes(b"o" * 50)
    (folder / "model.safetensors").write_bytes(b"m" * 50)
    cand, sig = kept_copy.snapshot(folder, run_dir, tmp_path)
    kept_copy.keep(cand, folder, sig, 10, time.time())
    assert kept_copy.restore_if_needed(run_dir) is None
    (folder / "model.safetensors").write_bytes(b"m")  # torn by a kill
    done = kept_copy.restore_if_needed(run_dir)
    assert done["step"] == 10 and (folder / "model.safetensors").read_bytes() == b"m" * 50
    assert (Path(done["moved_aside"]) / "model.safetensors").read_bytes() == b"m"


SAVES_IN_PLACE = r"""
import os, sys, time, torch
path = "out/ckpt.pt"
start = 0
if os.path.exists(path):
    start = torch.load(path, weights_only=True)["iter_num"]
    print(f"resumed from iter {start}", flush=True)
os.makedirs("out", exist_ok=True)
for it in range(start, start + 4000):
    print(f"iter {it}: loss {1.0 / (it + 1):.4f}", flush=True)
    if it % 100 == 0:
        torch.save({"model": {"w": torch.ones(4) * it}, "iter_num": it}, path)
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_resume_after_a_truncated_in_place_save_uses_the_kept_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "3")
    root = tmp_path / "camp"
    extra = "metrics_regex = 'iter (?P<step>\\d+): loss (?P<loss>\\S+)'\ncheckpoint_glob = \"out/ckpt.pt\"\n"
    write_campaign(root, [{"name": "nano", "extra": extra}])
    (root / "saver.py").write_text(SAVES_IN_PLACE)
    text = (
        (root / "campaign.toml")
        .read_text()
        .replace(f'"{sys.executable}", "steps.py", "20", "0.05"]', f'"{sys.executable}", "saver.py"]')
    )
    (root / "campaign.toml").write_text(text)
    c = load_campaign(root)
    try:
        control.up(c)
        run = wait_for(
            lambda: (r := run_of(client.request(c, "status"), "nano")) and r["checkpoint_verified"] and r,
            timeout=120,
            what="a verified in-place checkpoint",
        )
        run_dir = Path(run["run_dir"])
        meta = wait_for(
            lambda: (
                json.loads((kept_copy.kept_dir(run_dir) / "kept.json").read_text())
                if (kept_copy.kept_dir(run_dir) / "kept.json").exists()
                else None
            ),
            what="the kept copy",
        )
        client.request(c, "abort", run=run["id"], reason="test: simulate a kill during the save")
        wait_for(lambda: run_of(client.request(c, "status"), "nano")["state"] == "aborted", what="the abort")
        # the supervisor finishes pending gradings before it writes exit.json: a later save may
        # verify after the abort was asked, and the kept copy is then that newer one
        wait_for(lambda: (run_dir / "exit.json").exists(), what="the supervisor's end")
        meta = json.loads((kept_copy.kept_dir(run_dir) / "kept.json").read_text())
        ckpt = root / "out" / "ckpt.pt"
        ckpt.write_bytes(ckpt.read_bytes()[:100])  # what a kill mid-torch.save leaves
        client.request(c, "resume", run=run["id"])
        log = run_dir / "output.log"
        wait_for(lambda: "resumed from iter" in log.read_text(), timeout=90, what="the script to resume")
        line = [x for x in log.read_text().splitlines() if x.startswith("resumed from iter")][-1]
        assert int(line.split()[-1]) == meta["step"]
        assert (root / "out" / "ckpt.pt.unverified").stat().st_size == 100
        conn = L.connect(paths_for(c).ledger, readonly=True)
        kinds = [e["kind"] for e in L.events(conn, run_id=run["id"], limit=200)]
        conn.close()
        assert "checkpoint_restored" in kinds
    finally:
        control.down(c, abort_runs=True, timeout=40)
        kill_processes_under(tmp_path)
