"""A fixed campaign state for the console's screenshots and snapshot tests: the demo's shape (a
control, a variant, a planted variant stopped by a rule, one queued), written as real files in a
folder (campaign.toml, run folders with run.toml, metrics.jsonl, output.log, checkpoints and their
verify sidecars, a deliverables folder) and the status snapshot the runner would give for it.
Everything is computed from fixed numbers, so two runs produce the same screens byte for byte.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

STARTED_AT = dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.timezone.utc)
DAYS = 3
RETRIEVAL_HOURS = 2
EXPIRES = STARTED_AT + dt.timedelta(days=DAYS)
RETRIEVE_BY = EXPIRES - dt.timedelta(hours=RETRIEVAL_HOURS)

# moments for each expiry level (epoch seconds)
MOMENTS = {
    "ok": (STARTED_AT + dt.timedelta(hours=20, minutes=14, seconds=5)).timestamp(),
    "warning": (RETRIEVE_BY - dt.timedelta(hours=5, minutes=12, seconds=40)).timestamp(),
    "critical": (RETRIEVE_BY + dt.timedelta(minutes=31, seconds=9)).timestamp(),
    "expired": (EXPIRES + dt.timedelta(minutes=3, seconds=30)).timestamp(),
}

CAMPAIGN_TOML = f"""\
[campaign]
name = "demo"
question = "Does the wider model beat the control by at least 0.02 dev accuracy?"
output_dir = "deliverables"

[decision]
metric = "dev_acc"
higher_is_better = true
min_gain = 0.02
control = "control"

[bundle]
provider = "IteraGPU"
gpu = "RTX 4090"
days = {DAYS}
started_at = {STARTED_AT.strftime('%Y-%m-%dT%H:%M:%SZ')}
retrieval_hours = {RETRIEVAL_HOURS}

[[phase]]
name = "setup and data validation"
hours = 2
uses = "host"

[[phase]]
name = "main runs"
variants = ["control", "wide", "hot-lr", "long-ctx"]

[[variant]]
name = "control"
category = "essential"
command = ["python", "-m", "runner.demo.train", "--width", "64"]
hours = 9
checkpoint_every = "10m"

[[variant]]
name = "wide"
category = "useful"
command = ["python", "-m", "runner.demo.train", "--width", "256"]
hours = 14
checkpoint_every = "10m"

[[variant]]
name = "hot-lr"
category = "exploratory"
command = ["python", "-m", "runner.demo.train", "--lr", "3.0"]
hours = 6
checkpoint_every = "10m"

[[variant]]
name = "long-ctx"
category = "exploratory"
command = ["python", "-m", "runner.demo.train", "--context", "4096"]
hours = 12
checkpoint_every = "10m"

[[rule]]
kind = "nonfinite"
metric = "loss"

[[rule]]
kind = "below"
metric = "dev_acc"
threshold = 0.55
after_step = 2000

[[rule]]
kind = "stalled"
within = "15m"
"""

RUNS = [  # id, variant, category, state, steps, launched (h after start), hours planned, expected
    ("control-3f9a1c20", "control", "essential", "running", 4200, 12.0, 9.0, 9.4),
    ("wide-8be01d47", "wide", "useful", "running", 3100, 12.5, 14.0, 15.2),
    ("hot-lr-c0ffee11", "hot-lr", "exploratory", "stopped", 1450, 11.0, 6.0, 6.0),
]


PIDS = {"control-3f9a1c20": 5151, "wide-8be01d47": 5152}   # what the recorded NVML answers list


def _loss(variant: str, step: int) -> float:
    base = {"control": 2.6, "wide": 2.4, "hot-lr": 3.0}[variant]
    floor = {"control": 0.62, "wide": 0.48, "hot-lr": 0.9}[variant]
    wiggle = 0.06 * math.sin(step * 0.37) + 0.03 * math.sin(step * 0.051)
    value = floor + (base - floor) * math.exp(-step / 900) + wiggle
    if variant == "hot-lr" and step > 1200:
        value *= 1 + (step - 1200) / 60
    return value


def write_scene(folder: Path) -> Path:
    """Write the campaign folder; returns the campaign file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "campaign.toml").write_text(CAMPAIGN_TOML, encoding="utf-8")
    t0 = STARTED_AT.timestamp()
    for run_id, variant, category, state, steps, launched_h, _, _ in RUNS:
        rd = folder / "runs" / run_id
        (rd / "checkpoints").mkdir(parents=True, exist_ok=True)
        (rd / "run.toml").write_text(
            f'[run]\nid = "{run_id}"\nvariant = "{variant}"\ncategory = "{category}"\n\n'
            f'[variant]\nname = "{variant}"\ncategory = "{category}"\n'
            f'command = ["python", "-m", "runner.demo.train"]\nhours = 9\ncheckpoint_every = "10m"\n\n'
            '[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n\n'
            '[[rule]]\nkind = "below"\nmetric = "dev_acc"\nthreshold = 0.55\nafter_step = 2000\n\n'
            '[[rule]]\nkind = "stalled"\nwithin = "15m"\n', encoding="utf-8")
        lines = [json.dumps({"t": t0 + launched_h * 3600, "event": "start", "pid": 4242, "attempt": 1,
                             "resumed_from": None})]
        for step in range(1, steps + 1):
            loss = _loss(variant, step)
            if variant == "hot-lr" and step == steps:
                loss = float("nan")
            lines.append(json.dumps({"t": t0 + launched_h * 3600 + step * 6.0, "step": step, "loss": loss}))
        (rd / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (rd / "output.log").write_text("".join(
            f"step {s} loss {_loss(variant, s):.4f}\n" for s in range(max(1, steps - 30), steps + 1)),
            encoding="utf-8")
        for ck_step in range(1000, steps + 1, 1000):
            name = f"ckpt-{ck_step:09d}"
            (rd / "checkpoints" / f"{name}.pt").write_bytes(b"\0" * (3 * 1024 * 1024 + ck_step))
            (rd / "checkpoints" / f"{name}.json").write_text(json.dumps({"step": ck_step}), encoding="utf-8")
            (rd / "checkpoints" / f"{name}.verify.json").write_text(json.dumps({
                "path": str(rd / "checkpoints" / f"{name}.pt"), "step": ck_step, "verified": True,
                "grade": "full", "holds": ["model", "optimizer", "progress", "rng", "data"],
                "problems": [], "verify_seconds": 2.1, "bytes": 3 * 1024 * 1024 + ck_step}),
                encoding="utf-8")
    out = folder / "deliverables"
    out.mkdir(exist_ok=True)
    (out / "manifest.toml").write_text('[campaign]\nname = "demo"\n', encoding="utf-8")
    (out / "RELOAD.md").write_text("# Reloading\n", encoding="utf-8")
    return folder / "campaign.toml"


def snapshot(folder: Path, now: float) -> dict:
    """The status snapshot a runner would give for the scene at `now`."""
    t0 = STARTED_AT.timestamp()
    runs = []
    for run_id, variant, category, state, steps, launched_h, planned, expected in RUNS:
        rd = folder / "runs" / run_id
        launched = t0 + launched_h * 3600
        stopped = state == "stopped"
        ck = (steps // 1000) * 1000
        last_loss = float("nan") if stopped else _loss(variant, steps)
        rules = [
            {"kind": "nonfinite", "text": "loss not finite", "state": "fired" if stopped else "ok",
             "value": "nan" if stopped else None},
            {"kind": "below", "text": "dev_acc < 0.55 after step 2000",
             "state": "ok" if steps >= 2000 else "waiting", "value": None},
            {"kind": "stalled", "text": "no new metric for 15 min", "state": "ok", "value": None},
        ]
        runs.append({
            "id": run_id, "variant": variant, "category": category, "state": state,
            "pid": PIDS.get(run_id) if state == "running" else None, "step": steps, "loss": "nan" if stopped else round(last_loss, 6),
            "metrics": {"loss": last_loss}, "checkpoint_path": str(rd / "checkpoints" / f"ckpt-{ck:09d}.pt") if ck else None,
            "checkpoint_step": ck or None, "checkpoint_verified": bool(ck), "checkpoint_problem": None,
            "next_checkpoint_seconds": None if stopped else (-95.0 if variant == "wide" else 431.0),
            "stop_reason": "loss not finite (nan) at step 1450" if stopped else None,
            "stop_rule": "nonfinite" if stopped else None, "stop_value": "nan" if stopped else None,
            "launched_at": launched, "ended_at": launched + steps * 6.0 if stopped else None,
            "elapsed_seconds": steps * 6.0, "planned_hours": planned, "expected_hours": expected,
            "attempts": 1, "gpu_slot": "0", "run_dir": str(rd), "rules": rules,
        })
    remaining = EXPIRES.timestamp() - now
    return {
        "now": now,
        "campaign": {"name": "demo", "question": "Does the wider model beat the control?",
                     "root": str(folder), "file": str(folder / "campaign.toml")},
        "bundle": {"provider": "IteraGPU", "gpu": "RTX 4090", "days": DAYS, "plan": "3d", "price_usd": 47.14,
                   "gpus": 1, "order_ref": None, "started_at": STARTED_AT.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "expires_at": EXPIRES.strftime("%Y-%m-%dT%H:%M:%SZ"), "remaining_seconds": remaining,
                   "retrieve_by": RETRIEVE_BY.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "retrieve_seconds": RETRIEVE_BY.timestamp() - now, "warning": "ok"},
        "gpus": [], "nvml_error": None, "slots": {"total": 2, "busy": 2},
        "runner": {"pid": 1234, "started_at": t0, "version": "0.1.0"},
        "runs": runs,
        "queue": ["long-ctx"],
        "variants": [{"name": v, "category": c, "hours": h, "runs": [r[0] for r in RUNS if r[1] == v]}
                     for v, c, h in (("control", "essential", 9), ("wide", "useful", 14),
                                     ("hot-lr", "exploratory", 6), ("long-ctx", "exploratory", 12))],
        "pilot": None,
        "events": [],
    }
