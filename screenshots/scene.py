"""A fixed campaign state for the console's screenshots and snapshot tests: the demo campaign
(written by `runner.demo.write_demo` at a fixed moment) with runs part-way through (the control
and a variant running, the planted variant stopped by its rule, one variant queued), written as
real files (run folders with run.toml, metrics.jsonl, output.log, checkpoints and their verify
sidecars, a deliverables folder), and the status snapshot the runner would give for it. Every
number is fixed, so two runs draw the same screens byte for byte.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

NOW = dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC).timestamp()  # when the demo is written


def _bundle_times(folder: Path) -> tuple[float, float, float]:
    """(started_at, retrieve_by, expires_at) of the demo written in `folder`, epoch seconds."""
    from runner.campaign.model import load_campaign

    b = load_campaign(folder / "campaign.toml").bundle
    return b.started_at.timestamp(), b.retrieve_by.timestamp(), b.expires_at.timestamp()


def moments(folder: Path) -> dict[str, float]:
    """A moment in each expiry level of the demo's window (the demo's window closes 25 minutes
    after it is written, retrieval 6 minutes before that, warning 18 minutes before that); "closed"
    is when the closing scene's report is built (screenshots/closing_scene.py)."""
    _, retrieve_by, expires = _bundle_times(folder)
    return {
        "ok": NOW + 20,
        "warning": retrieve_by - 9 * 60 - 12,
        "critical": retrieve_by + 2 * 60 + 31,
        "expired": expires + 3 * 60 + 5,
        "closed": NOW + 15 * 60,
        "retrieved": retrieve_by - 4 * 60 - 40,  # after `campaign pull` verified everything on a laptop
        "wrapup": retrieve_by - 7 * 60 - 15,  # the wrap-up started 45 s ago
    }


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wrap_up_record(folder: Path, now: float) -> dict:
    """The runner's `wrap_up` while it stops the scene's runs: one stopped, one still checkpointing."""
    from runner.campaign.model import load_campaign

    retrieve_by = load_campaign(folder / "campaign.toml").bundle.retrieve_by.timestamp()
    return {
        "phase": "running",
        "at": iso(now - 45),
        "seconds": -45.0,
        "started_at": iso(now - 45),
        "done_at": None,
        "runs": {
            "control-3f9a1c20": "checkpointing",
            "lr-x3-8be01d47": "stopped at verified checkpoint step 1200",
        },
        "retrieve_by": iso(retrieve_by),
    }


def retrieval_record(folder: Path, now: float) -> dict:
    """What the runner records when `campaign pull` verified every file (the snapshot's `retrieval`)."""
    return {"t": now - 95, "files": 31, "bytes": 48_213_504, "to": "me@laptop", "dest": "/home/me/campaign-demo"}


RUNS = [  # id, variant, category, state, steps, launched (s after NOW), hours planned, expected
    ("control-3f9a1c20", "control", "essential", "running", 1450, 20, 0.04, 0.05),
    ("lr-x3-8be01d47", "lr-x3", "essential", "running", 1210, 95, 0.04, 0.045),
    ("lr-x1000-c0ffee11", "lr-x1000", "exploratory", "stopped", 140, 40, 0.04, 0.04),
]
CKPT_EVERY = 150
PIDS = {"control-3f9a1c20": 5151, "lr-x3-8be01d47": 5152}  # what the recorded NVML answers list
LR = {"control": "0.03", "lr-x3": "0.1", "lr-x10": "0.3", "lr-x1000": "30"}
STEP_SECONDS = 0.1


def _loss(variant: str, step: int) -> float:
    base = {"control": 1.45, "lr-x3": 1.4, "lr-x1000": 1.5}[variant]
    floor = {"control": 0.52, "lr-x3": 0.41, "lr-x1000": 0.9}[variant]
    tau = {"control": 420, "lr-x3": 260, "lr-x1000": 100}[variant]
    wiggle = 0.05 * math.sin(step * 0.37) + 0.025 * math.sin(step * 0.051)
    value = floor + (base - floor) * math.exp(-step / tau) + wiggle
    if variant == "lr-x1000" and step > 90:
        value *= 1 + (step - 90) / 6
    return value


def write_scene(folder: Path) -> Path:
    """Write the campaign folder; returns the campaign file."""
    import tomli_w

    from runner.campaign.model import load_campaign
    from runner.demo import write_demo

    folder.mkdir(parents=True, exist_ok=True)
    campaign = load_campaign(write_demo(folder, NOW))
    t0 = NOW
    for run_id, variant, category, _state, steps, launched, _, _ in RUNS:
        rd = folder / "runs" / run_id
        (rd / "checkpoints").mkdir(parents=True, exist_ok=True)
        frozen = {
            "run": {"id": run_id, "variant": variant, "category": category},
            "variant": {
                "name": variant,
                "category": category,
                "hours": 0.04,
                "checkpoint_every": "15s",
                "command": ["python", "train.py", "--lr", LR[variant]],
            },
            "rule": campaign.raw.get("rule", []),
        }
        (rd / "run.toml").write_text(tomli_w.dumps(frozen), encoding="utf-8")
        lines = [json.dumps({"t": t0 + launched, "event": "start", "pid": 4242, "attempt": 1, "resumed_from": None})]
        for step in range(1, steps + 1):
            loss = _loss(variant, step)
            if variant == "hot-lr" and step == steps:
                loss = float("nan")
            lines.append(json.dumps({"t": t0 + launched + step * STEP_SECONDS, "step": step, "loss": loss}))
        (rd / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (rd / "output.log").write_text(
            "".join(f"step {s} loss {_loss(variant, s):.4f}\n" for s in range(max(1, steps - 30), steps + 1)),
            encoding="utf-8",
        )
        for ck_step in range(CKPT_EVERY, steps + 1, CKPT_EVERY):
            name = f"ckpt-{ck_step:09d}"
            (rd / "checkpoints" / f"{name}.pt").write_bytes(b"\0" * (3 * 1024 * 1024 + ck_step))
            (rd / "checkpoints" / f"{name}.json").write_text(json.dumps({"step": ck_step}), encoding="utf-8")
            (rd / "checkpoints" / f"{name}.verify.json").write_text(
                json.dumps(
                    {
                        "path": str(rd / "checkpoints" / f"{name}.pt"),
                        "step": ck_step,
                        "verified": True,
                        "grade": "full",
                        "holds": ["model", "optimizer", "progress", "rng", "data"],
                        "problems": [],
                        "verify_seconds": 2.1,
                        "bytes": 3 * 1024 * 1024 + ck_step,
                    }
                ),
                encoding="utf-8",
            )
    out = folder / "deliverables"
    out.mkdir(exist_ok=True)
    (out / "manifest.toml").write_text('[campaign]\nname = "demo"\n', encoding="utf-8")
    (out / "RELOAD.md").write_text("# Reloading\n", encoding="utf-8")
    return folder / "campaign.toml"


def snapshot(folder: Path, now: float) -> dict:
    """The status snapshot a runner would give for the scene at `now` (the bundle part computed by
    the runner's own `runner.daemon.status.bundle_info`)."""
    import msgspec

    from runner.campaign.model import load_campaign
    from runner.daemon.status import bundle_info

    campaign = load_campaign(folder / "campaign.toml")
    runs = []
    for run_id, variant, category, state, steps, launched, planned, expected in RUNS:
        rd = folder / "runs" / run_id
        stopped = state == "stopped"
        ck = (steps // CKPT_EVERY) * CKPT_EVERY
        last_loss = _loss(variant, steps)
        rules = [
            {
                "kind": "nonfinite",
                "text": "loss not finite",
                "state": "fired" if stopped else "ok",
                "value": "nan" if stopped else None,
            },
            {
                "kind": "below",
                "text": "dev_acc < 0.3 after step 1200",
                "state": "ok" if steps >= 1200 else "waiting",
                "value": None,
            },
            {"kind": "truncated", "text": "truncated fraction > 0.1", "state": "ok", "value": None},
            {"kind": "no_resume_point", "text": "no verified checkpoint within 2 min", "state": "ok", "value": None},
            {"kind": "stalled", "text": "no new metric for 2 min", "state": "ok", "value": None},
        ]
        runs.append(
            {
                "id": run_id,
                "variant": variant,
                "category": category,
                "state": state,
                "pid": PIDS.get(run_id) if state == "running" else None,
                "step": steps,
                "loss": "nan" if stopped else round(last_loss, 6),
                "metrics": {"loss": round(last_loss, 6)},
                "checkpoint_path": str(rd / "checkpoints" / f"ckpt-{ck:09d}.pt") if ck else None,
                "checkpoint_step": ck or None,
                "checkpoint_verified": True if ck else None,
                "checkpoint_problem": None,
                "next_checkpoint_seconds": None if stopped else (-7.0 if variant == "lr-x3" else 11.0),
                "stop_reason": f"loss is nan at step {steps}" if stopped else None,
                "stop_rule": "nonfinite" if stopped else None,
                "stop_value": "nan" if stopped else None,
                "launched_at": NOW + launched,
                "ended_at": NOW + launched + steps * STEP_SECONDS if stopped else None,
                "elapsed_seconds": steps * STEP_SECONDS,
                "planned_hours": planned,
                "expected_hours": expected,
                "attempts": 1,
                "gpu_slot": "0",
                "run_dir": str(rd),
                "rules": rules,
            }
        )
    return {
        "now": now,
        "campaign": {
            "name": campaign.name,
            "question": campaign.question,
            "root": str(folder),
            "file": str(folder / "campaign.toml"),
        },
        "bundle": msgspec.to_builtins(bundle_info(campaign, now)),
        "gpus": [],
        "nvml_error": None,
        "slots": {"total": 2, "busy": 2},
        "runner": {"pid": 1234, "started_at": NOW, "version": "0.1.0"},
        "runs": runs,
        "queue": ["lr-x10"],
        "variants": [
            {"name": v.name, "category": v.category, "hours": v.hours, "runs": [r[0] for r in RUNS if r[1] == v.name]}
            for v in campaign.variants
        ],
        "pilot": None,
        "events": [],
    }


def scene_app(folder: Path, level: str, nvml, **kwargs):
    """The console on the scene at a moment of `level`, ticking only by hand, clock fixed, UTC."""
    from console.app import make_app
    from console.source import SnapshotSource
    from runner.campaign.model import load_campaign

    now = moments(folder)[level]
    snap = snapshot(folder, now)
    if level == "retrieved":
        snap["retrieval"] = retrieval_record(folder, now)
    if level == "wrapup":
        snap["runner"] = {**(snap.get("runner") or {}), "wrap_up": wrap_up_record(folder, now)}
    return make_app(
        SnapshotSource(snap),
        campaign=load_campaign(folder / "campaign.toml"),
        nvml=nvml,
        clock=lambda: now,
        auto_tick=False,
        tz=dt.UTC,
        use_user_keymap=False,
        ssh={"user": "me", "host": "gpu-host.example"},
        **kwargs,
    )
