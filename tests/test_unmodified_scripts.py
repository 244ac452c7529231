"""Unmodified training scripts under the real runner, the way a user tries them: the nanoGPT-like and
MNIST-like scripts of `examples/unmodified/` know nothing of the runner; it follows their printed
lines through `metrics_regex`, grades the files they save through `checkpoint_glob` in a fresh
process, and applies the stop rules to what it parsed. Real runner, supervisors, training
processes, verifiers and ledger; every process is cleaned up."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from runner.campaign.model import load_campaign
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.daemon import client, control
from runner.ledger import store as L
from tests.helpers_runner import run_of, wait_for
from tests.helpers_unmodified import EXAMPLE, copy_example, log_lines

pytestmark = pytest.mark.slow

EVAL_INTERVAL = 250  # train_gpt.py's default: a checkpoint after each evaluation


def status(c) -> dict:
    return client.request(c, "status")


def run_state(c, variant: str, *states: str) -> dict | None:
    r = run_of(status(c), variant)
    return r if r and r["state"] in states else None


def test_the_example_campaign_passes_check_and_plan(capsys):
    assert cli_main(["check", str(EXAMPLE)]) == 0
    assert "ok:" in capsys.readouterr().out
    assert cli_main(["plan", str(EXAMPLE), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] is True and plan["over_hours"] == 0
    names = [i["name"] for i in plan["items"]]
    for v in ("gpt-control", "gpt-high-lr", "mnist", "mnist-low-lr"):
        assert any(v in n for n in names), names


def test_nanogpt_like_run_is_followed_graded_killed_and_resumed(camp):
    # long enough that the SIGKILL lands in the middle, whatever the machine's speed
    copy_example(camp, ["gpt-control"], args={"gpt-control": [("--max_iters=3000", "--max_iters=1000000")]})
    c = load_campaign(camp)
    control.up(c)

    # followed: step and loss in the status, the step rising from one snapshot to the next
    seen = []

    def progressed():
        r = run_of(status(c), "gpt-control")
        if r and r["state"] == "running" and isinstance(r.get("step"), int):
            if not seen or r["step"] > seen[-1][0]:
                seen.append((r["step"], r["loss"]))
        return len(seen) >= 4

    wait_for(progressed, timeout=90, interval=0.3, what="the step to rise in the status")
    assert all(isinstance(loss, float) and math.isfinite(loss) for _, loss in seen), seen
    assert [s for s, _ in seen] == sorted({s for s, _ in seen})

    # out-control/ckpt.pt noticed, reloaded in a fresh process, graded; the run's checkpoint
    ckpt = camp / "out-control" / "ckpt.pt"
    run = wait_for(
        lambda: (r := run_of(status(c), "gpt-control")) and r.get("checkpoint_verified") and r,
        timeout=120,
        what="a verified checkpoint in the status",
    )
    assert run["checkpoint_path"] == str(ckpt)
    record = json.loads((camp / "out-control" / "ckpt.verify.json").read_text())
    assert record["verified"] is True and record["grade"] == "weights+optimizer", record
    assert record["holds"] == ["model", "optimizer", "progress"]
    assert any("random-number" in p for p in record["problems"])
    assert any("data position" in p for p in record["problems"])
    rules = {r["kind"]: r for r in run["rules"]}
    assert rules["no_resume_point"]["state"] == "ok" and rules["nonfinite"]["state"] == "ok"
    conn = L.connect(paths_for(c).ledger, readonly=True)
    rows = [r for r in L.checkpoints(conn, run["id"]) if r["path"] == str(ckpt)]
    conn.close()
    assert rows and rows[-1]["verified"] == 1 and rows[-1]["grade"] == "weights+optimizer"

    # the console's metric reader follows output.log through the frozen regex
    from console.metrics_tail import MetricTail

    tail = MetricTail(run["run_dir"])
    assert tail.path == Path(run["run_dir"]) / "output.log"
    wait_for(
        lambda: tail.poll() and len(tail.series) >= 20 or len(tail.series) >= 20,
        timeout=60,
        what="20 points in the console's curve",
    )
    tail.close()

    # SIGKILL of the training process (not its supervisor), between two of its in-place saves
    sup = json.loads((Path(run["run_dir"]) / "supervisor.json").read_text())
    child = psutil.Process(sup["child_pid"])
    assert "train_gpt.py" in " ".join(child.cmdline())

    def safe_moment():  # last line an `iter K` line well after a save and well before the next
        lines = log_lines(Path(run["run_dir"]))
        m = re.match(r"iter (\d+): ", lines[-1]) if lines else None
        return m and 10 <= int(m.group(1)) % EVAL_INTERVAL <= 120 and int(m.group(1)) > EVAL_INTERVAL

    wait_for(safe_moment, timeout=60, interval=0.02, what="a moment between two saves")
    child.send_signal(signal.SIGKILL)
    ended = wait_for(
        lambda: run_state(c, "gpt-control", "failed", "finished", "stopped", "aborted"),
        timeout=60,
        what="the run to end",
    )
    assert ended["state"] == "failed" and "SIGKILL" in ended["stop_reason"], ended
    exit_info = json.loads((Path(run["run_dir"]) / "exit.json").read_text())
    assert exit_info["signal_name"] == "SIGKILL" and exit_info["killed_by"] is None

    # the file it left, graded by hand as a user would: the CLI in a fresh process
    out = subprocess.run(
        [sys.executable, "-m", "runner", "checkpoint", str(ckpt), "--json"],
        cwd=camp,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    graded = json.loads(out.stdout)
    assert graded["verified"] is True and graded["grade"] == "weights+optimizer", graded
    assert graded["holds"] == ["model", "optimizer", "progress"]
    assert graded["step"] > 0 and graded["step"] % EVAL_INTERVAL == 0

    # the status's checkpoint step is the step the grader read from the file (iter_num)
    # (the save just before the kill may still be in the grader's hands on a loaded machine)
    def ledger_row():
        conn = L.connect(paths_for(c).ledger, readonly=True)
        try:
            rows = [r for r in L.checkpoints(conn, run["id"]) if r["path"] == str(ckpt)]
        finally:
            conn.close()
        return rows[-1] if rows and rows[-1]["step"] == graded["step"] else None

    row = wait_for(ledger_row, timeout=90, what="the ledger to hold the step the grader read")
    assert row["step"] == graded["step"], row
    assert run_of(status(c), "gpt-control")["checkpoint_step"] == graded["step"]

    # `campaign resume` keeps the id and runs the variant's resume_command (nanoGPT's
    # --init_from=resume), which goes on from the step the file holds
    rid = run["id"]
    assert client.request(c, "resume", run=rid)["run"] == rid

    def attempt_two_lines():
        lines = log_lines(Path(run["run_dir"]))
        marks = [i for i, line in enumerate(lines) if line.startswith("--- attempt 2 of")]
        return marks and lines[marks[0] :]

    lines = wait_for(
        lambda: (ls := attempt_two_lines()) and any(x.startswith("step ") for x in ls) and ls,
        timeout=90,
        what="the resumed attempt's first evaluation",
    )
    assert "--init_from=resume" in lines[0] and "Resuming training from out-control" in lines
    assert next(x for x in lines if x.startswith("step ")).startswith(f"step {graded['step']}: train loss ")
    again = wait_for(
        lambda: (r := run_state(c, "gpt-control", "running")) and (r["step"] or 0) > graded["step"] and r,
        timeout=60,
        what="the resumed run to go past its checkpoint",
    )
    assert again["id"] == rid and again["attempts"] == 2


def test_diverging_variant_is_stopped_by_the_nonfinite_rule(camp):
    copy_example(camp, ["gpt-high-lr"])
    c = load_campaign(camp)
    control.up(c)
    run = wait_for(
        lambda: run_state(c, "gpt-high-lr", "stopped", "finished", "failed"),
        timeout=120,
        what="the diverging run to end",
    )
    assert run["state"] == "stopped" and run["stop_rule"] == "nonfinite", run
    assert run["stop_value"] == "nan"
    # the step is that of the first `iter N: loss nan` line the script printed
    first_nan = next(
        int(m.group(1)) for line in log_lines(Path(run["run_dir"])) if (m := re.match(r"iter (\d+): loss nan,", line))
    )
    assert run["stop_reason"] == f"loss is nan at step {first_nan}"
    assert {r["kind"]: r["state"] for r in run["rules"]}["nonfinite"] == "fired"
    conn = L.connect(paths_for(c).ledger, readonly=True)
    row = L.get_run(conn, run["id"])
    verdicts = [e for e in L.events(conn, run_id=run["id"], limit=100) if e["kind"] == "verdict"]
    conn.close()
    assert row.state == "stopped" and row.stop_rule == "nonfinite" and row.stop_step == first_nan
    assert len(verdicts) == 1 and verdicts[0]["rule"] == "nonfinite" and verdicts[0]["step"] == first_nan
    assert verdicts[0]["metric"] == "loss" and math.isnan(float(verdicts[0]["value"]))
    exit_info = json.loads((Path(run["run_dir"]) / "exit.json").read_text())
    assert exit_info["killed_by"] == "rule" and exit_info["signal_name"] == "SIGTERM"  # no handler: TERM kills it
    assert not (camp / "out-high-lr" / "ckpt.pt").exists()  # stopped long before its first save


def test_mnist_like_accuracy_is_a_metric_a_below_rule_judges(camp):
    copy_example(camp, ["mnist", "mnist-low-lr"], args={"mnist": [('"--epochs", "3"', '"--epochs", "2"')]})
    c = load_campaign(camp)
    control.up(c)
    low = wait_for(
        lambda: run_state(c, "mnist-low-lr", "stopped", "finished", "failed"),
        timeout=150,
        what="the low-rate run to end",
    )
    assert low["state"] == "stopped" and low["stop_rule"] == "below", low
    acc = low["metrics"]["accuracy"]
    assert acc < 50 and low["stop_value"] == acc
    assert low["stop_reason"] == f"accuracy = {acc:g} is below 50 at step 1 (judged from step 1)"
    assert [line for line in log_lines(Path(low["run_dir"])) if line.startswith("Test set:")] == [
        next(line for line in log_lines(Path(low["run_dir"])) if line.startswith("Test set:"))
    ]  # one epoch only

    good = wait_for(
        lambda: run_state(c, "mnist", "stopped", "finished", "failed"), timeout=150, what="the mnist run to end"
    )
    assert good["state"] == "finished", good
    assert good["metrics"]["accuracy"] >= 50 and good["step"] == 2
    assert isinstance(good["metrics"]["test_loss"], float) and isinstance(good["loss"], float)
    assert {r["kind"]: r["state"] for r in good["rules"]}["below"] == "ok"
    # mnist_cnn.pt, saved at the very end, is graded after the run (weights only)
    record = json.loads((camp / "mnist_cnn.verify.json").read_text())
    assert record["verified"] is True and record["grade"] == "weights" and record["holds"] == ["model"]
    final = wait_for(
        lambda: (r := run_of(status(c), "mnist")) and r.get("checkpoint_path") and r,
        timeout=30,
        what="the saved model in the status",
    )
    assert final["checkpoint_path"] == str(camp / "mnist_cnn.pt") and final["checkpoint_verified"] is True


def test_an_in_place_rewritten_checkpoint_restarts_the_countdown(camp):
    copy_example(camp, ["gpt-control"], args={"gpt-control": [("--max_iters=3000", "--max_iters=1000000")]})
    c = load_campaign(camp)
    control.up(c)
    ckpt = camp / "out-control" / "ckpt.pt"
    record = camp / "out-control" / "ckpt.verify.json"
    first = wait_for(
        lambda: record.exists() and json.loads(record.read_text())["at"], timeout=120, what="the first grading"
    )
    second = wait_for(
        lambda: (at := json.loads(record.read_text())["at"]) != first and at,
        timeout=120,
        what="a second version graded",
    )

    def recorded_twice():
        conn = L.connect(paths_for(c).ledger, readonly=True)
        try:
            return (
                len(
                    [
                        e
                        for e in L.events(conn, limit=200)
                        if e["kind"] == "checkpoint_verified" and e.get("path") == str(ckpt)
                    ]
                )
                >= 2
            )
        finally:
            conn.close()

    wait_for(recorded_twice, timeout=60, what="the runner to record the second grading")
    conn = L.connect(paths_for(c).ledger, readonly=True)
    row = [r for r in L.checkpoints(conn) if r["path"] == str(ckpt)][-1]
    conn.close()
    assert row["t"] >= second - 0.001, (row["t"], first, second)
