"""The pull side installs without torch: the package's plain dependencies hold no torch, `campaign
pull --help` runs where torch cannot be imported, and where the tool's environment has no torch
checkpoints are graded with the run's own interpreter."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from runner.grading import interpreter

ROOT = Path(__file__).resolve().parents[1]
NO_TORCH = "import sys; sys.modules['torch'] = None  # any `import torch` now raises ImportError\n"


def test_a_plain_install_brings_no_torch_and_the_host_extra_does():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("torch")]
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["host"])
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["test"])
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e '.[host]' && campaign demo" in readme
    assert "pip install -e '.[test]' && pytest" in readme


@pytest.mark.parametrize("argv", [["pull", "--help"], ["--help"]])
def test_pull_help_works_where_torch_cannot_be_imported(argv):
    code = NO_TORCH + f"from runner.cli import main; sys.exit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "pull" in proc.stdout and "torch" not in proc.stderr


def test_the_grader_runs_under_the_runs_python_when_the_tool_has_no_torch(monkeypatch, tmp_path):
    import torch

    from runner.closing.artifact_reload import reload_artifact

    ckpt = tmp_path / "w.pt"
    torch.save({"model": {"w": torch.zeros(2)}}, ckpt)
    monkeypatch.setattr(interpreter, "torch_here", lambda: False)
    # the run's command names a Python (here, one that has torch): that one grades
    assert interpreter.grader_python([sys.executable, "train.py"], tmp_path) == sys.executable
    assert interpreter.grader_python(["bash", "run.sh"], tmp_path) == sys.executable  # not a Python: our own
    assert interpreter.run_python(["python3", "x.py"]) is not None
    assert interpreter.run_python(["./missing/python", "x.py"], tmp_path) is None
    result = reload_artifact(ckpt, python=interpreter.grader_python([sys.executable, "train.py"], tmp_path))
    assert result["verified"] is True, result
