"""End to end: the built-in demo run to its end by the real runner, then verify, the manifest and the report.

The planted variant must be rejected with its rule, the rest approved, the conclusion must answer the
demo's question, and every file the manifest lists must match its sha256 and read back (checkpoints
graded in a fresh interpreter). Takes one to three minutes on two loaded cores.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib

import pytest
from helpers_runner import kill_processes_under, wait_for

from runner.campaign.model import load_campaign
from runner.cli import main
from runner.closing.artifact_reload import reload_artifacts
from runner.closing.deliverables import parse_problem
from runner.demo import write_demo
from runner.ledger import store as ledger

pytestmark = pytest.mark.slow

TERMINAL = {"finished", "failed", "stopped", "aborted", "refused"}


def _states(campaign):
    path = campaign.state_dir / "ledger.sqlite"
    if not path.exists():
        return {}
    conn = ledger.connect(path, readonly=True)
    try:
        return {r["variant"]: r["state"] for r in conn.execute("SELECT variant, state FROM runs")}
    finally:
        conn.close()


def test_demo_campaign_to_its_end(tmp_path, capsys):
    folder = tmp_path / "demo"
    campaign = load_campaign(write_demo(folder))
    env = dict(os.environ, CAMPAIGN_SLOTS="2", CUDA_VISIBLE_DEVICES="")
    try:
        subprocess.run(
            [sys.executable, "-m", "runner", "up", str(folder)], env=env, check=True, timeout=120, capture_output=True
        )
        names = {v.name for v in campaign.variants}
        wait_for(
            lambda: (s := _states(campaign)) and set(s) == names and set(s.values()) <= TERMINAL,
            timeout=600,
            what="every demo variant to end",
            interval=2.0,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "runner", "down", str(folder), "--abort-runs"],
            env=env,
            timeout=120,
            capture_output=True,
        )
        kill_processes_under(folder)

    assert main(["verify", str(folder), "--json"]) == 0
    verify = json.loads(capsys.readouterr().out)
    by_variant = {r["variant"]: r for r in verify["runs"]}
    planted = by_variant.pop("lr-x1000")
    assert planted["approved"] is False and planted["problems"][0].startswith("not finished: stopped by rule nonfinite")
    assert all(r["approved"] for r in by_variant.values()), by_variant

    assert main(["report", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["approved"] == 3
    assert report["usd_per_approved"] == pytest.approx(47.14 / 3, abs=1e-6)
    [rejected] = report["rejected"]
    assert rejected["run"].startswith("lr-x1000-") and "nonfinite" in rejected["reason"]
    # the conclusion answers "does a higher learning rate beat the control by 2 points?"
    assert report["outcome"] in ("positive", "negative")
    assert {c["variant"] for c in report["comparisons"]} == {"lr-x3", "lr-x10"}
    for c in report["comparisons"]:
        assert c["meets"] == (c["gain"] >= 0.02 - 1e-9)
        if c["meets"]:
            assert c["variant"] in report["conclusion"]
    if report["outcome"] == "negative":
        assert report["conclusion"].startswith("Negative result")

    out = campaign.output_path
    manifest = tomllib.loads((out / "manifest.toml").read_text())
    assert manifest["bundle"]["order_ref"] == "DEMO-0001" and manifest["plan"]["items"]
    artifacts = []
    for run in manifest["run"]:
        assert run["files"], run["id"]
        for f in run["files"]:
            path = out / f["path"]
            assert path.stat().st_size == f["bytes"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == f["sha256"]
            assert parse_problem(path) is None, f["path"]
            if f["kind"] == "artifact":
                artifacts.append(path)
        if run["variant"] == "lr-x1000":
            assert run["state"] == "stopped" and "nonfinite" in run["stop_reason"]
    assert len(artifacts) == 3
    assert all(r["verified"] for r in reload_artifacts(artifacts)), "an artifact in the manifest does not reload"
    reload_md = (out / "RELOAD.md").read_text()
    for path in artifacts:
        assert f"campaign checkpoint {path.relative_to(out)} --json" in reload_md
