"""A training script run by another interpreter, one without the tool installed (a user's own
virtualenv or conda env), can import the training-side helpers and nothing else of the tool; and a
campaign folder that holds its own `runner.py` next to `train.py` runs unharmed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.campaign.model import load_campaign
from runner.daemon import client, control
from tests.helpers_runner import write_campaign

TRAIN = r"""
import importlib, json, os, sys

import runner as mine  # the user's own runner.py, next to this script
from campaign_train import atomic, formats, metrics, predictions  # the torch-free helpers

probe = {"python": sys.executable, "mine": getattr(mine, "MINE", None), "importable": {}}
for name in ("console", "tests", "examples", "runner.daemon", "runner.ledger", "msgspec", "textual"):
    try:
        importlib.import_module(name)
        probe["importable"][name] = True
    except ImportError:
        probe["importable"][name] = False
metrics.report(1, loss=0.5)
with open(os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "probe.json"), "w") as f:
    json.dump(probe, f)
"""


def _bare_python(where: Path) -> str:
    """A fresh virtualenv of the base interpreter, without pip and without the tool."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    python = where / "bin" / "python"
    # the new interpreter really lacks the tool: neither its modules nor its dependencies import
    r = subprocess.run([python, "-c", "import msgspec"], capture_output=True, cwd=where, timeout=30)
    assert r.returncode != 0
    return str(python)


@pytest.mark.slow
def test_a_foreign_interpreter_gets_campaign_train_only_and_a_users_runner_py_wins(camp, tmp_path):
    python = _bare_python(tmp_path / "venv")
    write_campaign(camp, [{"name": "a"}], phase=[])
    (camp / "train.py").write_text(TRAIN)
    (camp / "runner.py").write_text("MINE = 'the user runner.py'\n")
    text = (camp / "campaign.toml").read_text()
    text = text.replace(
        f'command = ["{sys.executable}", "steps.py", "20", "0.05"]', f'command = ["{python}", "train.py"]'
    )
    assert "train.py" in text
    (camp / "campaign.toml").write_text(text)
    c = load_campaign(camp)
    control.up(c)
    rid = client.request(c, "start", variant="a")["run"]
    deadline = time.monotonic() + 20
    state = None
    while time.monotonic() < deadline:
        run = next((r for r in client.request(c, "status")["runs"] if r["id"] == rid), None)
        state = run and run["state"]
        if state not in (None, "queued", "running"):
            break
        time.sleep(0.2)
    run_dir = camp / "runs" / rid
    assert state == "finished", (state, (run_dir / "output.log").read_text() if run_dir.exists() else "")
    probe = json.loads((run_dir / "probe.json").read_text())
    assert probe["python"] == python
    assert probe["mine"] == "the user runner.py"
    assert probe["importable"] == {
        "console": False,
        "tests": False,
        "examples": False,
        "runner.daemon": False,
        "runner.ledger": False,
        "msgspec": False,
        "textual": False,
    }
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(x.get("step") == 1 and x.get("loss") == 0.5 for x in lines)


def test_the_tools_processes_run_with_a_safe_path_and_the_training_process_gets_the_users_back(tmp_path):
    from runner.import_paths import SAFE_VAR, tool_env, training_env

    for users in ({}, {SAFE_VAR: "x", "PYTHONPATH": "/mine"}):
        tool = tool_env({"PATH": "/bin", **users})
        assert tool[SAFE_VAR] == "1"  # a runner.py in the campaign folder cannot shadow `runner`
        nested = tool_env(tool)  # the supervisor, started by the runner
        train = training_env(nested, tmp_path)
        assert train.get(SAFE_VAR) == users.get(SAFE_VAR)
        assert train["PYTHONPATH"].split(":")[1:] == ([users["PYTHONPATH"]] if users else [])
