"""A campaign made by `campaign init`, whose command is a script using the training helpers, gets
approved runs without further edits: init, set the command (and the window's start), run it to the
end with a real runner, `campaign verify` approves every run."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest

from runner.campaign.model import load_campaign
from runner.cli import main as cli_main
from runner.daemon import control
from tests.helpers_runner import iso, wait_for

pytestmark = pytest.mark.slow

HELPER_SCRIPT = """\
import torch
from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer
from campaign_train.predictions import finish

torch.manual_seed(0)
x = torch.randn(64, 4)
y = (x[:, 0] > 0).long()
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
ckpt = Checkpointer(model, opt)
restored = ckpt.restore()
step = restored.step if restored else 0
while step < 30:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    acc = (model(x).argmax(1) == y).float().mean().item()
    metrics.report(step, loss=loss.item(), dev_acc=acc, truncated=0, samples=64)
    ckpt.maybe_save(step)
    if ckpt.should_stop:
        ckpt.exit()
pred = model(x).argmax(1).tolist()
rows = [{"id": i, "label": int(y[i]), "pred": p} for i, p in enumerate(pred)]
finish(ckpt, step, rows, labels=y.tolist(), predictions=pred)
"""


def test_a_campaign_from_init_with_a_helper_script_is_approved(camp, capsys):
    assert cli_main(["init", str(camp)]) == 0
    (camp / "train.py").write_text(HELPER_SCRIPT)
    path = camp / "campaign.toml"
    text = path.read_text()
    text = text.replace('command = ["python", "train.py"', f'command = ["{sys.executable}", "train.py"')
    text = re.sub(r"started_at = \S+", f"started_at = {iso(time.time() - 3600)}", text, count=1)
    path.write_text(text)
    c = load_campaign(camp)
    assert all(v.command[0] == sys.executable for v in c.variants)
    capsys.readouterr()
    control.up(c)

    def ended() -> dict | None:
        capsys.readouterr()
        cli_main(["status", str(camp), "--json"])
        runs = json.loads(capsys.readouterr().out)["runs"]
        done = len(runs) == len(c.variants) and all(r["state"] not in ("queued", "running") for r in runs)
        return {r["variant"]: r for r in runs} if done else None

    runs = wait_for(ended, what="every run of the template to end", timeout=120, interval=0.5)
    assert {v: r["state"] for v, r in runs.items()} == {"control": "finished", "variant": "finished"}
    capsys.readouterr()
    assert cli_main(["verify", str(camp), "--json"]) == 0, capsys.readouterr()
    verify = json.loads(capsys.readouterr().out)
    assert verify["ok"] is True
    assert [(r["approved"], r["problems"]) for r in verify["runs"]] == [(True, [])] * 2
    # what the README says the helpers deliver, and what verify looked for without `expects`
    for r in runs.values():
        folder = camp / "runs" / r["id"]
        for name in ("predictions.jsonl", "error_analysis.json", "checkpoints/final.pt"):
            assert (folder / name).stat().st_size > 0, name
