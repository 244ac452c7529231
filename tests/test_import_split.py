"""The split between the two sides holds by test: the runner never loads Textual, the console
never loads torch (docs/INTERNALS.md). Modules are discovered, so new ones are covered."""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_ALLOWED = (
    "campaign_train.checkpoint",
    "campaign_train.data",  # the resumable loader (a DataLoader)
    "campaign_train.rng",  # random-number states as tensors
    "campaign_train.snapshot",  # the host copy of a checkpoint's tensors
    "runner.grading.checkpoint_grade",
    # the graders by format (the child `checkpoint_grade` runs); `client` and `result` stay torch-free
    "runner.grading.dicts",
    "runner.grading.file_pass",
    "runner.grading.distributed",
    "runner.grading.safetensors_format",
    "runner.grading.torch_files",
    "campaign_train.predictions",
    "runner.demo",
)


def discover(package: str) -> list[str]:
    pkg_dir = ROOT / package
    names = [package]
    for info in pkgutil.walk_packages([str(pkg_dir)], prefix=f"{package}."):
        names.append(info.name)
    # `__main__` modules run a program when imported (`python -m runner`): not libraries
    return sorted(n for n in names if not n.endswith(".__main__"))


def torch_allowed(name: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in TORCH_ALLOWED)


PROBE = """
import importlib, json, sys
failed = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception as exc:   # reported, not hidden: a module that cannot import is a failure too
        failed[name] = f"{type(exc).__name__}: {exc}"
banned = sys.argv[1]
print(json.dumps({"loaded": sorted(m for m in sys.modules if m == banned or m.startswith(banned + ".")),
                  "failed": failed}))
"""


def probe(banned: str, modules: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", PROBE, banned, *modules], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_runner_side_never_loads_textual():
    modules = [m for m in discover("runner") if not torch_allowed(m)]
    assert "runner.campaign.model" in modules and "runner.campaign.plan" in modules
    result = probe("textual", modules)
    assert result["loaded"] == [], f"textual loaded by the runner side: {result['loaded']}"
    assert result["failed"] == {}, "runner modules that do not import"


def test_the_console_side_never_loads_torch():
    modules = discover("console")
    if modules == ["console"]:
        pytest.skip("console has only its __init__ so far")
    result = probe("torch", modules)
    assert result["loaded"] == [], f"torch loaded by the console side: {result['loaded']}"
    assert result["failed"] == {}, "console modules that do not import"


def imported_roots(path: Path) -> set[str]:
    """Every module name a file imports, at any depth (lazy imports in functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_runner_module_imports_textual_even_lazily():
    offenders = {}
    for path in sorted((ROOT / "runner").rglob("*.py")):
        bad = {n for n in imported_roots(path) if n == "textual" or n.startswith("textual.")}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_no_console_module_imports_torch_or_the_torch_side_of_the_runner():
    offenders = {}
    for path in sorted((ROOT / "console").rglob("*.py")):
        bad = {n for n in imported_roots(path) if n == "torch" or n.startswith("torch.") or torch_allowed(n)}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_only_the_training_side_imports_torch():
    offenders = {}
    for path in sorted((ROOT / "runner").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        module = module.replace("runner.training_api.", "")  # the training-side package's own name
        if torch_allowed(module):
            continue
        bad = {n for n in imported_roots(path) if n == "torch" or n.startswith("torch.")}
        if bad:
            offenders[module] = sorted(bad)
    assert offenders == {}
