"""A Lightning script as users write it (LightningModule, Trainer, ModelCheckpoint saving `.ckpt`
files into a folder of the run's, or into Lightning's own `lightning_logs/version_N/checkpoints`) under the real runner: followed through the opt-in campaign_train
callback, its `.ckpt` files graded by the supervisor through `checkpoint_glob`, a SIGKILL of the
training process, and `campaign resume` from the newest verified `.ckpt`, which the runner hands
to the script as CAMPAIGN_RESUME_FROM and the script passes to `fit(ckpt_path=...)`."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.daemon import client, control
from runner.ledger import store as L
from tests.helpers_runner import kill_processes_under, run_of, wait_for, write_campaign

if importlib.util.find_spec("lightning") is None:  # not imported here: seconds on a loaded machine
    pytest.skip("lightning is not installed (the test extra)", allow_module_level=True)

MAX_STEPS = 40
LIGHTNING_SCRIPT = r"""
import os, sys, time, torch, lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from campaign_train.integrations.lightning import campaign_callback

resume = os.environ.get("CAMPAIGN_RESUME_FROM")  # the newest verified .ckpt, set by `campaign resume`

def delay(step):  # the first attempt crawls after its first .ckpt: the SIGKILL surely lands mid-run
    return 0.0 if resume else (0.1 if step < 20 else 2.0)

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        time.sleep(delay(self.global_step))
        return loss
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
if sys.argv[1] == "default":  # Lightning's own layout: <root>/lightning_logs/version_N/checkpoints/
    saver = ModelCheckpoint(filename="step-{step}", auto_insert_metric_name=False,
                            every_n_train_steps=20, save_top_k=-1)
    where = {"default_root_dir": os.environ["CAMPAIGN_RUN_DIR"]}  # as the README's snippet has it
else:  # a folder of the user's own
    saver = ModelCheckpoint(dirpath=sys.argv[1], filename="step-{step}", auto_insert_metric_name=False,
                            every_n_train_steps=20, save_top_k=-1)
    where = {"logger": False}
print("resuming from", resume if resume else "nothing: a fresh start", flush=True)
trainer = L.Trainer(max_steps=MAX_STEPS, accelerator="cpu", enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[saver, campaign_callback()], **where)
trainer.fit(Tiny(), loader, ckpt_path=resume)
""".replace("MAX_STEPS", str(MAX_STEPS))


# (the script's argument, checkpoint_glob, where the first attempt's .ckpt files land under run_dir)
LAYOUTS = {
    "own folder": ("{run_dir}/out", "{run_dir}/out/*.ckpt", "out"),
    "lightning_logs": ("default", "{run_dir}/lightning_logs/**/*.ckpt", "lightning_logs/version_0/checkpoints"),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_lightning_run_killed_and_resumed_from_its_verified_ckpt_under_the_runner(tmp_path, monkeypatch, layout):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    root = tmp_path / "camp"
    arg, glob, first_dir = LAYOUTS[layout]
    extra = f'checkpoint_glob = "{glob}"\n'
    rules = '[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n[[rule]]\nkind = "no_resume_point"\nwithin = "2m"\n'
    write_campaign(root, [{"name": "pl", "extra": extra}], rules=rules)
    (root / "train_pl.py").write_text(LIGHTNING_SCRIPT)
    text = (root / "campaign.toml").read_text()
    old = f'"{sys.executable}", "steps.py", "20", "0.05"]'
    assert old in text
    (root / "campaign.toml").write_text(text.replace(old, f'"{sys.executable}", "train_pl.py", "{arg}"]'))
    c = load_campaign(root)
    try:
        control.up(c)
        run = wait_for(
            lambda: (r := run_of(client.request(c, "status"), "pl")) and r["checkpoint_verified"] and r,
            timeout=90,
            what="a verified .ckpt",
        )
        run_dir = Path(run["run_dir"])
        assert run["step"] and run["loss"] is not None  # followed through the callback
        assert run["step"] < MAX_STEPS, "the run ended before the kill: make the first attempt slower"
        os.kill(run["pid"], signal.SIGKILL)
        failed = wait_for(
            lambda: (r := run_of(client.request(c, "status"), "pl")) and r["state"] == "failed" and r,
            timeout=60,
            what="failed",
        )
        assert "SIGKILL" in (failed["stop_reason"] or ""), failed["stop_reason"]
        assert cli_main(["resume", str(root), run["id"]]) == 0
        done = wait_for(
            lambda: (r := run_of(client.request(c, "status"), "pl")) and r["state"] == "finished" and r,
            timeout=120,
            what="finished",
        )
        assert done["attempts"] == 2 and done["step"] == MAX_STEPS

        # resumed from the newest verified .ckpt of the first attempt, not from step 0
        launch = json.loads((run_dir / "launch.json").read_text())
        resume_from = Path(launch["resume_from"])
        assert launch["attempt"] == 2 and resume_from.parent == run_dir / first_dir and resume_from.suffix == ".ckpt"
        first = json.loads((resume_from.with_name(resume_from.stem + ".verify.json")).read_text())
        assert first["verified"] and first["step"] > 0
        assert f"resuming from {resume_from}" in (run_dir / "output.log").read_text()
        steps = [
            r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r
        ]
        back = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])  # where attempt 2 begins
        assert steps[back] == first["step"] + 1, (first["step"], steps[back - 3 : back + 3])
        assert steps[-1] == MAX_STEPS

        # every .ckpt graded the same by the supervisor: weights and optimizer (no RNG state,
        # a plain DataLoader's position is not saved); the ledger holds the supervisor's grade
        ckpts = [p for p in run_dir.glob(glob.removeprefix("{run_dir}/")) if p.suffix == ".ckpt"]
        recs = {p.name: json.loads(p.with_name(p.stem + ".verify.json").read_text()) for p in ckpts}
        if layout == "lightning_logs":  # the resumed attempt logs into a new version folder
            assert {p.parent.parent.name for p in ckpts} == {"version_0", "version_1"}
        assert recs and all(r["verified"] and r["grade"] == "weights+optimizer" for r in recs.values()), recs
        assert max(r["step"] for r in recs.values()) == MAX_STEPS
        conn = L.connect(paths_for(c).ledger, readonly=True)
        rows = L.checkpoints(conn, run["id"])
        conn.close()
        by_path = {Path(r["path"]).stem: r for r in rows}
        for name, rec in recs.items():
            row = by_path[name.removesuffix(".ckpt")]
            assert row["verified"] == 1 and row["grade"] == rec["grade"] and row["step"] == rec["step"]
    finally:
        control.down(c, abort_runs=True, timeout=40)
        kill_processes_under(tmp_path)
