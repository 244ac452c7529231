"""An unmodified HF Trainer script under the real runner: followed through `metrics_format = "hf"`,
its `checkpoint-N` folders graded by the supervisor, a SIGKILL, and `resume` from the newest
verified folder (regression: folders matched by checkpoint_glob were never graded, so a
`no_resume_point` rule stopped a healthy run)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.daemon import client, control
from tests.helpers_runner import kill_processes_under, run_of, wait_for, write_campaign

pytest.importorskip("transformers")

HF_SCRIPT = r"""
import glob, os, sys, time, torch, transformers
out = sys.argv[1]
cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
torch.manual_seed(0)
data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(400)]
class Slow(transformers.TrainerCallback):
    def on_step_end(self, *a, **k):
        time.sleep(0.15)
args = transformers.TrainingArguments(output_dir=out, max_steps=60, save_steps=10, logging_steps=5,
    per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True)
resume = bool(glob.glob(os.path.join(out, "checkpoint-*")))
print("resuming" if resume else "fresh", flush=True)
transformers.Trainer(model=transformers.GPT2LMHeadModel(cfg), args=args, train_dataset=data, callbacks=[Slow()]).train(
    resume_from_checkpoint=resume or None)
"""


@pytest.mark.slow
def test_unmodified_hf_trainer_killed_and_resumed_under_the_runner(tmp_path, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = tmp_path / "camp"
    extra = 'metrics_format = "hf"\ncheckpoint_glob = "{run_dir}/out/checkpoint-*"\n'
    rules = '[[rule]]\nkind = "nonfinite"\nmetric = "grad_norm"\n[[rule]]\nkind = "no_resume_point"\nwithin = "2m"\n'
    write_campaign(root, [{"name": "hf", "extra": extra}], rules=rules)
    (root / "train_hf.py").write_text(HF_SCRIPT)
    text = (root / "campaign.toml").read_text()
    text = text.replace(
        f'"{sys.executable}", "steps.py", "20", "0.05"]', f'"{sys.executable}", "train_hf.py", "{{run_dir}}/out"]'
    )
    (root / "campaign.toml").write_text(text)
    c = load_campaign(root)
    try:
        control.up(c)
        run = wait_for(
            lambda: (r := run_of(client.request(c, "status"), "hf")) and r["checkpoint_verified"] and r,
            timeout=120,
            what="a verified checkpoint folder",
        )
        run_dir = Path(run["run_dir"])
        assert run["step"] and run["loss"] is not None  # followed through the HF log lines
        os.kill(run["pid"], signal.SIGKILL)
        wait_for(lambda: run_of(client.request(c, "status"), "hf")["state"] == "failed", timeout=60, what="failed")
        client.request(c, "resume", run=run["id"])
        wait_for(lambda: run_of(client.request(c, "status"), "hf")["state"] == "finished", timeout=180, what="finished")
        log = (run_dir / "output.log").read_text()
        assert "resuming" in log
        recs = [json.loads(p.read_text()) for p in (run_dir / "out").glob("checkpoint-*.verify.json")]
        assert recs and all(r["verified"] and r["grade"] == "full" for r in recs), recs
        assert max(r["step"] for r in recs) >= 60  # the resumed attempt reached the end
    finally:
        control.down(c, abort_runs=True, timeout=40)
        kill_processes_under(tmp_path)
