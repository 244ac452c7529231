"""The opt-in callbacks: the HF Trainer and Lightning report through campaign_train.metrics with
their true global step, and the Trainer announces each checkpoint folder it saves. Each runs in
its own process, as a training script does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HF_SCRIPT = """
import torch, transformers
from campaign_train.integrations.hf import CampaignCallback
cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
torch.manual_seed(0)
data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(16)]
args = transformers.TrainingArguments(output_dir="out", max_steps=4, save_steps=2, logging_steps=2,
                                      per_device_train_batch_size=4, report_to=[], use_cpu=True)
transformers.Trainer(model=transformers.GPT2LMHeadModel(cfg), args=args, train_dataset=data,
                     callbacks=[CampaignCallback()]).train()
"""

LIGHTNING_SCRIPT = """
import torch, lightning as L
from campaign_train.integrations.lightning import campaign_callback

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, _):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 4)), batch_size=4)
L.Trainer(max_steps=5, logger=False, enable_progress_bar=False, enable_model_summary=False,
          enable_checkpointing=False, callbacks=[campaign_callback()]).fit(Tiny(), loader)
"""


def _run(tmp_path: Path, script: str) -> list[dict]:
    (tmp_path / "train.py").write_text(script)
    env = dict(os.environ, CAMPAIGN_RUN_DIR=str(tmp_path / "run"), HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = str(ROOT / "runner" / "training_api")
    proc = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_hf_trainer_callback_reports_true_steps_and_checkpoints(tmp_path):
    pytest.importorskip("transformers")
    lines = _run(tmp_path, HF_SCRIPT)
    logged = [x for x in lines if "loss" in x]
    assert [x["step"] for x in logged] == [2, 4] and all("grad_norm" in x for x in logged)  # true global steps
    saved = [x for x in lines if x.get("event") == "checkpoint"]
    assert [x["step"] for x in saved] == [2, 4] and saved[0]["path"].endswith("checkpoint-2")


def test_lightning_callback_reports_the_global_step(tmp_path):
    pytest.importorskip("lightning")
    lines = _run(tmp_path, LIGHTNING_SCRIPT)
    assert [x["step"] for x in lines if "loss" in x] == [1, 2, 3, 4, 5]
