"""The import paths of the processes the runner starts.

Two kinds of process, two rules:
- the tool's own processes (the runner, a supervisor, a grader) may import `runner` and
  `campaign_train`, wherever and however the tool is installed;
- a training process gains exactly one top-level name, `campaign_train`, and nothing else of the
  tool: never its checkout (`tests`, `console`, `examples`), never its `site-packages` (whose torch
  could shadow the user's own CUDA build in another virtualenv or conda env), and never a folder in
  which a user's own `runner.py` could be shadowed or shadow anything.

The tool's own processes also run with PYTHONSAFEPATH=1 (Python 3.11's `-P`): they start in the
campaign folder, where a user's `runner.py` would otherwise shadow the tool's `runner` package.

The user's own PYTHONPATH and PYTHONSAFEPATH are carried through the tool's processes in
`ORIGINAL_VAR` and `ORIGINAL_SAFE_VAR` so that the training process gets them back unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

import campaign_train
import runner

ORIGINAL_VAR = "CAMPAIGN_ORIGINAL_PYTHONPATH"  # the user's PYTHONPATH, when it was set
MARK_VAR = "CAMPAIGN_PYTHONPATH_BY_TOOL"  # present once the tool has put its own path in front
SAFE_VAR = "PYTHONSAFEPATH"  # set: no script or working folder is put in front of sys.path
ORIGINAL_SAFE_VAR = "CAMPAIGN_ORIGINAL_PYTHONSAFEPATH"  # the user's PYTHONSAFEPATH, when it was set


def training_package_dir() -> Path:
    """The folder that holds the training-side package's modules."""
    return Path(campaign_train.__file__).resolve().parent


def _tool_roots() -> list[str]:
    roots = [str(Path(runner.__file__).resolve().parent.parent), str(training_package_dir().parent)]
    return list(dict.fromkeys(roots))


def _original(env: dict[str, str]) -> str | None:
    if MARK_VAR in env:
        return env.get(ORIGINAL_VAR)
    return env.get("PYTHONPATH")


def _join(first: str, rest: str | None) -> str:
    return first + (os.pathsep + rest if rest else "")


def tool_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for one of the tool's own processes (`python -m runner...`)."""
    out = dict(os.environ if env is None else env)
    original = _original(out)
    if MARK_VAR not in out:  # the user's own setting, kept for the training process
        if SAFE_VAR in out:
            out[ORIGINAL_SAFE_VAR] = out[SAFE_VAR]
        else:
            out.pop(ORIGINAL_SAFE_VAR, None)
    out[SAFE_VAR] = "1"
    out[MARK_VAR] = "1"
    if original is None:
        out.pop(ORIGINAL_VAR, None)
    else:
        out[ORIGINAL_VAR] = original
    out["PYTHONPATH"] = _join(os.pathsep.join(_tool_roots()), original)
    return out


def training_path_dir(state_dir: Path) -> Path:
    """A folder whose only entry is `campaign_train`.

    With the editable install that is the package's own parent (`runner/training_api/`); with a
    regular install the package sits in `site-packages`, so a folder under the campaign's state
    folder holds a link to it (or, on a file system without links, a copy of its few files).
    """
    pkg = training_package_dir()
    entries = {p.name for p in pkg.parent.iterdir() if p.name != "__pycache__"}
    if entries == {pkg.name}:
        return pkg.parent
    target = state_dir / "training_path"
    link = target / pkg.name
    target.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and Path(os.readlink(link)) == pkg:
        return target
    tmp = target / f".{pkg.name}.{os.getpid()}"
    try:
        os.symlink(pkg, tmp)
        os.replace(tmp, link)
    except OSError:
        import shutil

        if tmp.is_symlink():
            tmp.unlink()
        shutil.rmtree(link, ignore_errors=True) if link.is_dir() and not link.is_symlink() else None
        shutil.copytree(pkg, link, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return target


def training_env(env: dict[str, str], state_dir: Path) -> dict[str, str]:
    """The environment of a training process: the user's PYTHONPATH plus `campaign_train` only."""
    out = dict(env)
    original = _original(out)
    if MARK_VAR in out:
        if ORIGINAL_SAFE_VAR in out:
            out[SAFE_VAR] = out[ORIGINAL_SAFE_VAR]
        else:
            out.pop(SAFE_VAR, None)
    out.pop(ORIGINAL_SAFE_VAR, None)
    out.pop(ORIGINAL_VAR, None)
    out.pop(MARK_VAR, None)
    out["PYTHONPATH"] = _join(str(training_path_dir(state_dir)), original)
    return out
