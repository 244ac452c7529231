"""`{run_dir}` and `{run_id}`: two variants of one unmodified script that saves to a fixed path get
a folder each, and the checkpoint glob, env and expected files follow them there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.placeholders import expand, expand_all
from runner.daemon import client, control
from tests.helpers_runner import kill_processes_under, run_of, wait_for, write_campaign

SAVER = r"""
import os, sys, time, torch
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for it in range(3):
    print(f"iter {it}: loss {1.0 / (it + 1):.4f}", flush=True)
    torch.save({"model": {"w": torch.ones(2) * it}, "iter_num": it}, os.path.join(out, "ckpt.pt"))
    time.sleep(3)                  # a save every 3 s: each version holds still long enough to grade
open(os.path.join(out, "tag.txt"), "w").write(os.environ["RUN_TAG"])
"""


def test_expand_replaces_only_the_two_placeholders():
    assert expand("--out={run_dir}/out", "a-12345678") == "--out=runs/a-12345678/out"
    assert expand_all(["{run_id}", "{x}", r"(?P<n>\d{2})"], "a-1") == ["a-1", "{x}", r"(?P<n>\d{2})"]


@pytest.mark.slow
def test_each_run_saves_into_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    root = tmp_path / "camp"
    extra = (
        "metrics_regex = 'iter (?P<step>\\d+): loss (?P<loss>\\S+)'\n"
        'checkpoint_glob = "{run_dir}/out/*.pt"\n'
        'expects = ["{run_dir}/out/tag.txt"]\n'
        'env = { RUN_TAG = "{run_id}" }\n'
    )
    write_campaign(root, [{"name": "a", "extra": extra}, {"name": "b", "extra": extra}])
    (root / "saver.py").write_text(SAVER)
    text = (root / "campaign.toml").read_text()
    for _variant in ("a", "b"):  # the same command for both: only the placeholder keeps them apart
        text = text.replace(
            f'"{sys.executable}", "steps.py", "20", "0.05"]', f'"{sys.executable}", "saver.py", "{{run_dir}}/out"]', 1
        )
    (root / "campaign.toml").write_text(text)
    c = load_campaign(root)
    try:
        control.up(c)
        done = wait_for(
            lambda: (
                (s := client.request(c, "status"))
                and all(r["state"] == "finished" for r in s["runs"])
                and len(s["runs"]) == 2
                and s
            ),
            timeout=180,
            what="both runs to finish",
        )
        for v in ("a", "b"):
            run = run_of(done, v)
            out = Path(run["run_dir"]) / "out"
            assert (out / "tag.txt").read_text() == run["id"]
            argv = json.loads((Path(run["run_dir"]) / "launch.json").read_text())["argv"]
            assert argv[-1] == f"runs/{run['id']}/out"
        # the checkpoints are each run's own, verified in a fresh process
        wait_for(
            lambda: all(
                (r := run_of(client.request(c, "status"), v))["checkpoint_verified"]
                and r["checkpoint_path"].startswith(r["run_dir"])
                for v in ("a", "b")
            ),
            timeout=180,
            what="each run's own checkpoint verified",
        )
        from runner.closing.deliverables import verify_campaign

        verification = verify_campaign(load_campaign(root))
        for check in verification.checks:
            assert check.problems == [] and check.approved, check.problems
            assert any(p.endswith("/out/tag.txt") for p, _ in check.files)
    finally:
        control.down(c, abort_runs=True, timeout=40)
        kill_processes_under(tmp_path)
