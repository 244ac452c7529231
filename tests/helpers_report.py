"""Campaign folders for the deliverables/report/pilot tests: real files, a real ledger, real checkpoints.

The tests stand in for the runner here (and only here): they insert ledger rows as the schema in
runner/ledger/store.py says and lay out run folders as docs/INTERNALS.md says.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

from runner.campaign.model import load_campaign
from runner.ledger import store as ledger

CAMPAIGN_TOML = """\
[campaign]
name = "rank-ablation"
question = "Does rank 16 beat the control by at least 1 point of dev accuracy?"
output_dir = "deliverables"

{decision}[bundle]
provider = "IteraGPU"
gpu = "RTX 4090"
days = 3
started_at = {started}
order_ref = "IG-0001"
retrieval_hours = 2

[[phase]]
name = "setup and data validation"
hours = 3
uses = "gpu"

[[phase]]
name = "main runs"
variants = [{variants}]

[[phase]]
name = "analysis"
hours = 2
uses = "human"

{variant_tables}
[[rule]]
kind = "nonfinite"
metric = "loss"

[[spend]]
what = "dataset transfer"
usd = 3.20
"""

DECISION = """\
[decision]
metric = "dev_acc"
higher_is_better = true
min_gain = 0.01
control = "control"

"""

VARIANT = """\
[[variant]]
name = "{name}"
category = "{category}"
command = ["python", "train.py", "--variant", "{name}"]
hours = {hours}
checkpoint_every = "30m"
{extra}
"""


def make_campaign(
    root: Path,
    variants=(("control", "essential", 10, ""), ("rank16", "essential", 10, ""), ("rank64", "exploratory", 10, "")),
    *,
    started: float | None = None,
    no_decision: bool = False,
):
    """Write campaign.toml into `root` and load it."""
    started = time.time() - 6 * 3600 if started is None else started
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    tables = "".join(VARIANT.format(name=n, category=c, hours=h, extra=x) for n, c, h, x in variants)
    text = CAMPAIGN_TOML.format(
        started=stamp,
        variants=", ".join(f'"{v[0]}"' for v in variants),
        variant_tables=tables,
        decision="" if no_decision else DECISION,
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.toml").write_text(text, encoding="utf-8")
    return load_campaign(root)


def open_writable(campaign):
    return ledger.connect(campaign.state_dir / "ledger.sqlite")


_TEMPLATE: Path | None = None

_MAKE_CHECKPOINT = """\
import sys, torch
from campaign_train.checkpoint import Checkpointer
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
Checkpointer(model, opt, every_s=1e9, directory=sys.argv[1], install_signals=False).save_final(100)
"""


def _template_checkpoint() -> Path:
    """One real final checkpoint (campaign_train.checkpoint, in a child process: it installs hooks and opens
    a metric writer), made once per test session and copied wherever a test needs one."""
    global _TEMPLATE
    if _TEMPLATE is None:
        folder = Path(tempfile.mkdtemp(prefix="report-ckpt-"))
        atexit.register(shutil.rmtree, folder, True)
        env = dict(os.environ, CAMPAIGN_RUN_DIR=str(folder), CUDA_VISIBLE_DEVICES="")
        subprocess.run(
            [sys.executable, "-c", _MAKE_CHECKPOINT, str(folder / "checkpoints")],
            check=True,
            env=env,
            timeout=300,
            capture_output=True,
        )
        _TEMPLATE = folder / "checkpoints" / "final.pt"
    return _TEMPLATE


def save_checkpoint(path: Path) -> None:
    """A real checkpoint of a tiny model with its sidecar, as the training side writes them."""
    template = _template_checkpoint()
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    shutil.copyfile(template.with_suffix(".json"), path.with_suffix(".json"))


def add_run(
    conn,
    campaign,
    variant: str,
    *,
    config_hash: str = "0000aaaa",
    state: str = "finished",
    dev_acc: float | None = 0.70,
    hours: float = 1.0,
    launched_at: float | None = None,
    attempts: int = 1,
    stop_rule: str | None = None,
    stop_reason: str | None = None,
    stop_value: str | None = None,
    stop_step: int | None = None,
    files: bool = True,
    checkpoint: bool = True,
    frozen_extra: dict | None = None,
    run_id: str | None = None,
) -> Path:
    """One run: its folder with real files and its ledger rows. Returns the run folder."""
    run_id = run_id or f"{variant}-{config_hash}"
    run_dir = campaign.runs_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    v = campaign.variant(variant)
    frozen_variant = {
        "name": v.name,
        "category": v.category,
        "command": list(v.command),
        "hours": v.hours,
        "adapter": v.adapter,
        "expects": list(v.expects),
    }
    if v.base_revision:
        frozen_variant["base_revision"] = v.base_revision
    frozen_variant.update(frozen_extra or {})
    (run_dir / "run.toml").write_text(
        tomli_w.dumps(
            {
                "run": {
                    "id": run_id,
                    "variant": variant,
                    "category": v.category,
                    "config_hash": config_hash,
                    "campaign": campaign.name,
                    "created_at": time.time(),
                },
                "variant": frozen_variant,
                "rule": [{"kind": "nonfinite", "metric": "loss"}],
                "env": {},
            }
        ),
        encoding="utf-8",
    )
    launched = time.time() - 2 * 3600 if launched_at is None else launched_at
    t = launched
    lines = []
    for step in range(0, 101, 20):
        t = launched + step * 10
        row = {"t": t, "step": step, "loss": 2.0 - step / 100}
        if dev_acc is not None:
            row["dev_acc"] = dev_acc - (100 - step) / 1000
        lines.append(json.dumps(row))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if files:
        (run_dir / "predictions.jsonl").write_text(
            "".join(json.dumps({"id": i, "label": i % 2, "pred": (i * 7) % 2}) + "\n" for i in range(20)),
            encoding="utf-8",
        )
        (run_dir / "error_analysis.json").write_text(json.dumps({"per_class": {"0": 0.1, "1": 0.2}}), encoding="utf-8")
    ckpt = run_dir / "checkpoints" / "final.pt"
    if checkpoint:
        save_checkpoint(ckpt)
    ended = launched + hours * 3600 if state not in ("running", "queued") else None
    conn.execute(
        "INSERT INTO runs(id, variant, category, config_hash, state, run_dir, planned_hours, queued_at, launched_at,"
        " ended_at, active_seconds, attempts, stop_reason, stop_rule, stop_value, stop_step)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            run_id,
            variant,
            v.category,
            config_hash,
            state,
            str(run_dir),
            v.hours,
            launched - 1,
            launched if state != "queued" else None,
            ended,
            hours * 3600 if ended else 0.0,
            attempts,
            stop_reason,
            stop_rule,
            stop_value,
            stop_step,
        ),
    )
    conn.execute("INSERT INTO events(t, run_id, kind, data) VALUES (?, ?, 'launched', '{}')", (launched, run_id))
    if dev_acc is not None:
        conn.execute(
            "INSERT INTO metric_last(run_id, name, step, value, text, t) VALUES (?, 'dev_acc', 100, ?, ?, ?)",
            (run_id, dev_acc, repr(dev_acc), t),
        )
    conn.execute(
        "INSERT INTO run_progress(run_id, offset, lines, first_t, last_t, first_step, last_step)"
        " VALUES (?, 0, 6, ?, ?, 0, 100)",
        (run_id, launched, launched + 1000),
    )
    if checkpoint:
        conn.execute(
            "INSERT INTO checkpoints(run_id, path, step, t, bytes, verified, grade, write_seconds, verify_seconds)"
            " VALUES (?, ?, 100, ?, ?, 1, 'weights+optimizer', 0.5, 2.0)",
            (run_id, str(ckpt), launched + 600, ckpt.stat().st_size),
        )
    return run_dir
