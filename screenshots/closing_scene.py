"""A fixed campaign at its close, for the report screen's screenshot and snapshot: the demo
campaign (written at the fixed moment of `scene.NOW`) with its runs over — the control and lr-x3
finished with fixed dev accuracies, lr-x10 cut at the pilot decision before it ran, the planted
lr-x1000 stopped by its nonfinite rule — as real files: run folders, a real ledger, real final
checkpoints that reload (written by `campaign_train.checkpoint` in a child process: this process never
imports torch), predictions and error analyses.

The script stands in for the runner here, as the report's own tests do: it writes the ledger rows
the schema in runner/ledger/store.py describes, and records the decision through `runner.closing.pilot`.
Every figure is fixed, so the report draws the same page every time (its clock is fixed too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import tomli_w

from screenshots.scene import NOW

# variant, config hash, state, dev_acc, active minutes, launched (s after NOW), stop (rule, value, step, reason)
CLOSING_RUNS = [
    ("control", "3f9a1c20", "finished", 0.58, 2.6, 30, None),
    ("lr-x3", "8be01d47", "finished", 0.8133, 2.5, 200, None),
    ("lr-x1000", "c0ffee11", "stopped", None, 0.3, 360, ("nonfinite", "nan", 140, "loss is nan at step 140")),
    ("lr-x10", "5eed0a77", "aborted", None, 0.0, None, None),
]
FINAL_STEP = 2400  # the demo's run length (runner/demo/train.py)
DECIDED_AT = NOW + 190  # after the pilot (the control) ended
CLOSED_AT = NOW + 15 * 60  # when the report is built

MAKE_FINAL = """\
import sys, torch
from campaign_train.checkpoint import Checkpointer
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
Checkpointer(model, opt, every_s=1e9, directory=sys.argv[1], install_signals=False).save_final(int(sys.argv[2]))
"""


def _final_checkpoint(into: Path) -> None:
    """A real final checkpoint of a tiny model, written in a child process."""
    env = dict(
        os.environ,
        CAMPAIGN_RUN_DIR=str(into.parent),
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    )
    subprocess.run(
        [sys.executable, "-c", MAKE_FINAL, str(into), str(FINAL_STEP)],
        check=True,
        env=env,
        timeout=300,
        capture_output=True,
    )


def write_closing_scene(folder: Path) -> Path:
    """Write the closed campaign into `folder` (emptied first); returns the campaign file."""
    from runner.campaign.model import load_campaign
    from runner.closing.pilot import ensure_frozen_plan, record_decision
    from runner.demo import write_demo
    from runner.ledger import store as ledger

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    campaign = load_campaign(write_demo(folder, NOW))
    conn = ledger.connect(campaign.state_dir / "ledger.sqlite")
    try:
        ensure_frozen_plan(campaign, conn, NOW + 1)
        template: Path | None = None
        for variant, hash_, state, dev_acc, minutes, launched, stop in CLOSING_RUNS:
            run_id = f"{variant}-{hash_}"
            rd = campaign.runs_dir / run_id
            (rd / "checkpoints").mkdir(parents=True)
            v = campaign.variant(variant)
            (rd / "run.toml").write_text(
                tomli_w.dumps(
                    {
                        "run": {
                            "id": run_id,
                            "variant": variant,
                            "category": v.category,
                            "config_hash": hash_,
                            "campaign": campaign.name,
                            "created_at": NOW,
                            "root": str(folder),
                        },
                        "variant": {
                            "name": variant,
                            "category": v.category,
                            "command": list(v.command),
                            "hours": v.hours,
                            "checkpoint_every": "15s",
                            "expects": list(v.expects),
                        },
                        "rule": campaign.raw.get("rule", []),
                        "env": {},
                    }
                ),
                encoding="utf-8",
            )
            ran = launched is not None
            t0 = NOW + (launched or 0)
            ended = t0 + minutes * 60 if ran else DECIDED_AT
            if ran:
                steps = FINAL_STEP if state == "finished" else stop[2]
                lines = [
                    {
                        "t": t0 + s * minutes * 60 / steps,
                        "step": s,
                        "loss": 1.5 - s / 2400,
                        **({"dev_acc": dev_acc - (steps - s) / 20000} if dev_acc is not None else {}),
                    }
                    for s in range(0, steps + 1, 100 if steps > 200 else 20)
                ]
                (rd / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
                (rd / "output.log").write_text(f"step {steps}\n", encoding="utf-8")
            if state == "finished":
                (rd / "predictions.jsonl").write_text(
                    "".join(json.dumps({"id": i, "label": i % 4, "pred": (i * 3) % 4}) + "\n" for i in range(40)),
                    encoding="utf-8",
                )
                (rd / "error_analysis.json").write_text(json.dumps({"accuracy": dev_acc}), encoding="utf-8")
                final = rd / "checkpoints" / "final.pt"
                if template is None:
                    _final_checkpoint(rd / "checkpoints")
                    template = final
                else:
                    shutil.copyfile(template, final)
                    shutil.copyfile(template.with_suffix(".json"), final.with_suffix(".json"))
                conn.execute(
                    "INSERT INTO checkpoints(run_id, path, step, t, bytes, verified, grade, write_seconds,"
                    " verify_seconds) VALUES (?, ?, ?, ?, ?, 1, 'full', 0.1, 6.5)",
                    (run_id, str(final), FINAL_STEP, ended, final.stat().st_size),
                )
                conn.execute(
                    "INSERT INTO metric_last(run_id, name, step, value, text, t) VALUES (?, 'dev_acc', ?, ?, ?, ?)",
                    (run_id, FINAL_STEP, dev_acc, repr(dev_acc), ended),
                )
            rule, value, step, reason = stop or (None, None, None, None)
            if state == "aborted":
                reason = "cut at the pilot decision"
            conn.execute(
                "INSERT INTO runs(id, variant, category, config_hash, state, run_dir, planned_hours, queued_at,"
                " launched_at, ended_at, active_seconds, attempts, stop_reason, stop_rule, stop_value, stop_step,"
                " cut_by_decision) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    variant,
                    v.category,
                    hash_,
                    state,
                    str(rd),
                    v.hours,
                    NOW + 1,
                    t0 if ran else None,
                    ended,
                    minutes * 60,
                    1 if ran else 0,
                    reason,
                    rule,
                    value,
                    step,
                    1 if state == "aborted" else 0,
                ),
            )
            if ran:
                conn.execute("INSERT INTO events(t, run_id, kind, data) VALUES (?, ?, 'launched', '{}')", (t0, run_id))
                conn.execute(
                    "INSERT INTO run_progress(run_id, offset, lines, first_t, last_t, first_step, last_step)"
                    " VALUES (?, 0, 10, ?, ?, 0, ?)",
                    (run_id, t0, ended, steps),
                )
            if run_id.startswith("control"):
                conn.commit()
                record_decision(
                    conn,
                    campaign,
                    "cut",
                    ["control", "lr-x3", "lr-x1000"],
                    "lr-x10 sits between the control and lr-x3: it would not change the answer",
                    "me@gpu-host (console)",
                    now=DECIDED_AT,
                )
        conn.commit()
    finally:
        conn.close()
    return folder / "campaign.toml"
