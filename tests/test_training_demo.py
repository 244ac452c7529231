"""The demo campaign: a valid file with a back-dated window, and a training script that really runs."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import pytest
from helpers_training import env_for, read_lines, training_run_dir, wait_for  # noqa: F401 (fixture)

from campaign_train.predictions import DEFAULT_EXPECTS
from runner.campaign.clock import read_clock
from runner.campaign.model import load_campaign
from runner.demo import write_demo
from runner.grading.checkpoint_grade import grade_path

NOW = 1_795_000_000.0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    return write_demo(folder, NOW)


def test_demo_file_loads_and_asks_one_controlled_question(demo):
    c = load_campaign(demo)
    assert demo.name == "campaign.toml" and (demo.parent / "train.py").is_file()
    assert c.decision.metric == "dev_acc" and c.decision.control == "control" and c.decision.min_gain > 0
    by_name = {v.name: v for v in c.variants}
    assert {v.category for v in c.variants} == {"essential", "useful", "exploratory"}
    # Control and variants differ in one factor only: the value after --lr.
    stripped = {tuple(a for i, a in enumerate(v.command) if v.command[i - 1] != "--lr") for v in c.variants}
    assert len(stripped) == 1
    assert all(v.command[0] == sys.executable and v.command[1] == "train.py" for v in c.variants)
    assert by_name["lr-x1000"].category == "exploratory"
    assert {r.kind for r in c.rules} == {"nonfinite", "below", "truncated", "no_resume_point", "stalled"}
    assert all(v.checkpoint_every_s == 15 and tuple(v.expects) == DEFAULT_EXPECTS for v in c.variants)


def test_demo_window_goes_calm_warning_critical_within_a_session(demo):
    b = load_campaign(demo).bundle
    assert b.days == 3 and abs(b.expires_at.timestamp() - (NOW + 25 * 60)) < 1
    assert read_clock(b, NOW).level == "ok"
    assert read_clock(b, NOW + 3 * 60).level == "warning"
    assert read_clock(b, NOW + 20 * 60).level == "critical"
    assert read_clock(b, NOW + 26 * 60).level == "expired"


def test_demo_plan_fits(demo):
    from runner.campaign.plan import plan_campaign

    assert plan_campaign(load_campaign(demo)).to_json()["fits"] is True


def test_demo_corpus_is_deterministic(demo, tmp_path):
    again = write_demo(tmp_path / "again", NOW)
    for name in ("train.jsonl", "dev.jsonl"):
        assert (demo.parent / "data" / name).read_bytes() == (again.parent / "data" / name).read_bytes()
    assert demo.read_text() == again.read_text()
    rows = [json.loads(x) for x in (demo.parent / "data" / "train.jsonl").read_text().splitlines()]
    long_share = sum(len(r["text"].split()) > 48 for r in rows) / len(rows)
    assert 0.02 < long_share < 0.1  # some inputs are truncated, within the rule's 0.1


def _train(demo, run_dir, *args, **env):
    return subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=demo.parent,
        env=env_for(run_dir, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_demo_training_reports_and_delivers(demo, tmp_path):
    run_dir = tmp_path / "run"
    r = _train(demo, run_dir, "--steps", "40", "--eval-every", "20")
    assert r.returncode == 0, r.stderr
    lines = read_lines(run_dir / "metrics.jsonl")
    steps = [x for x in lines if "loss" in x]
    assert [x["step"] for x in steps] == list(range(1, 41))
    assert sum(x["truncated"] for x in steps) > 0
    assert sum(x["truncated"] for x in steps) / sum(x["samples"] for x in steps) < 0.1
    assert [x["step"] for x in lines if "dev_acc" in x] == [20, 40]
    assert lines[-1]["event"] == "end" and lines[-1]["status"] == "ok"
    for name in DEFAULT_EXPECTS:
        assert (run_dir / name).is_file(), name
    preds = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert len(preds) == 600 and {"id", "label", "prediction", "correct"} <= set(json.loads(preds[0]))
    analysis = json.loads((run_dir / "error_analysis.json").read_text())
    assert set(analysis["per_bucket"]) == {"fits", "long (truncated)"} and analysis["summary"]
    final = grade_path(run_dir / "checkpoints" / "final.pt")
    assert final["verified"] and final["grade"] == "full"
    assert json.loads((run_dir / "checkpoints" / "final.json").read_text())["final"] is True


@pytest.mark.slow
def test_planted_variant_diverges(demo, tmp_path):
    run_dir = tmp_path / "run"
    r = _train(demo, run_dir, "--lr", "30", "--steps", "120", "--eval-every", "1000")
    assert r.returncode == 0, r.stderr
    losses = [x["loss"] for x in read_lines(run_dir / "metrics.jsonl") if "loss" in x]
    assert math.isfinite(losses[0]) and not all(math.isfinite(v) for v in losses)


@pytest.mark.slow
def test_demo_stops_on_sigterm_and_resumes(demo, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "train.py", "--steps", "100000"],
        cwd=demo.parent,
        env=env_for(run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: any(x.get("step", 0) >= 5 and "loss" in x for x in read_lines(run_dir / "metrics.jsonl")),
            "training steps",
            proc=proc,
        )
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == 143 and "asked to stop" in out
    saved = [x for x in read_lines(run_dir / "metrics.jsonl") if x.get("event") == "checkpoint"][-1]
    r = _train(
        demo,
        run_dir,
        "--steps",
        str(saved["step"] + 3),
        "--eval-every",
        "1000",
        CAMPAIGN_RESUME_FROM=saved["path"],
        CAMPAIGN_ATTEMPT="2",
    )
    assert r.returncode == 0, r.stderr
    assert f"resumed at step {saved['step']}" in r.stdout
