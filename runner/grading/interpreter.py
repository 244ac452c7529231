"""Which Python grades a checkpoint: the tool's own when it has torch, else the run's.

torch is an extra of the package (`campaign-console[host]`): a laptop that only pulls results has
none, and a host may keep torch in the training virtualenv or conda env alone. There the grader
runs under the run's interpreter (its command's first word, when that is a Python), which the
tool's processes reach through `runner.import_paths.tool_env` (the grader imports only the
standard library, `runner` and `campaign_train`)."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")


@functools.cache
def torch_here() -> bool:
    """Whether this interpreter can import torch (found, not imported: torch is slow to import)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def run_python(command: Sequence[str] | None, cwd: Path | None = None) -> str | None:
    """The run's Python: its command's first word when that names a Python interpreter."""
    if not command:
        return None
    first = str(command[0])
    if not PYTHON_NAME.fullmatch(Path(first).name):
        return None
    if "/" in first:
        path = Path(first) if os.path.isabs(first) or cwd is None else cwd / first
        return str(path) if os.access(path, os.X_OK) else None
    return shutil.which(first)


def grader_python(command: Sequence[str] | None = None, cwd: Path | None = None) -> str:
    """The interpreter to grade a run's checkpoints with."""
    if torch_here():
        return sys.executable
    return run_python(command, cwd) or sys.executable
