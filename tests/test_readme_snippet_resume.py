"""The README's training-helper snippet, run literally: killed mid-epoch by SIGTERM and resumed, it
gives bitwise the same later losses as a run never interrupted (regression: its loader's position
only moved with a manual `sampler.advance` the README did not show, so 0 of 220 losses matched)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import os, signal, torch
torch.manual_seed(0)
dataset = torch.utils.data.TensorDataset(torch.randn(200, 8), torch.randint(0, 3, (200,)))
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.1), torch.nn.Linear(16, 3))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, 7, gamma=0.9)
total_steps = 40
KILL_AT = int(os.environ.get("KILL_AT", "0"))

def train_step(model, opt, sched, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if KILL_AT and step + 1 == KILL_AT:
        os.kill(os.getpid(), signal.SIGTERM)  # what the runner sends; the snippet checkpoints and exits
    return loss
"""


def _snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"```python\n(from campaign_train import metrics\n.*?)```", text, re.S)
    assert m, "the README's Training scripts snippet is gone"
    return m.group(1).replace("batch_size=64", "batch_size=16")  # 13 batches an epoch, 40 steps


def _run(run_dir: Path, script: Path, kill_at: int = 0) -> int:
    env = dict(os.environ, CAMPAIGN_RUN_DIR=str(run_dir), KILL_AT=str(kill_at), CAMPAIGN_CHECKPOINT_EVERY="3600")
    env["PYTHONPATH"] = str(ROOT / "runner" / "training_api")
    return subprocess.run([sys.executable, str(script)], env=env, timeout=120, cwd=run_dir).returncode


def _losses(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def test_the_readme_snippet_resumes_bitwise_exactly_as_written(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PRELUDE + _snippet())
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    assert _run(whole, script) == 0
    assert _run(cut, script, kill_at=18) != 0  # SIGTERM mid-epoch 2 (13 batches an epoch)
    assert max(_losses(cut)) == 18
    assert _run(cut, script) == 0  # the resume: the latest good checkpoint, step 18
    a, b = _losses(whole), _losses(cut)
    later = [s for s in range(19, 41)]
    assert [a[s] for s in later] == [b[s] for s in later]
