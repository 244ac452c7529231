"""Reloading final artifacts in a fresh interpreter, remembered per content within this process.

Apart from the checks themselves: this is the one place that spends child processes (and torch
imports), so the cache that keeps a refreshing runner from reloading unchanged bytes lives here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from campaign_train.formats import sha256_file
from runner.grading.client import verify_many
from runner.grading.result import failed as grading_failed

RELOAD_TIMEOUT_S = 300.0

_reload_cache: dict[tuple[str, int, int, str, bool], dict[str, Any]] = {}


def _cache_key(path: Path, trust: bool) -> tuple[str, int, int, str, bool] | None:
    """The same bytes graded under the same options: (path, size, mtime, sha256, trust)."""
    try:
        st = path.stat()
        digest = sha256_file(path) if path.is_file() else _folder_digest(path)
    except OSError:
        return None
    return (str(path), st.st_size, st.st_mtime_ns, digest, trust)


def _folder_digest(folder: Path) -> str:
    """A folder artifact's identity: every file's relative path, size and mtime."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def reload_artifact(
    path: Path, timeout: float = RELOAD_TIMEOUT_S, python: str | None = None, *, trust_pickled_module: bool = False
) -> dict[str, Any]:
    """Load `path` in a fresh interpreter; the `checkpoint --json` keys come back."""
    return reload_artifacts([path], timeout, python, trust_pickled_module=[trust_pickled_module])[0]


def reload_artifacts(
    paths: list[Path],
    timeout: float = RELOAD_TIMEOUT_S,
    python: str | None = None,
    *,
    trust_pickled_module: list[bool] | None = None,
) -> list[dict[str, Any]]:
    """Grade artifacts in fresh interpreters (`runner.grading.client.verify_many`, the
    grading the supervisor and `campaign checkpoint` use), one torch import per batch.

    A result is remembered for the same bytes within this process, so a runner refreshing the
    output folder does not reload an unchanged file again."""
    trust = trust_pickled_module or [False] * len(paths)
    results: dict[int, dict[str, Any]] = {}
    keys: dict[int, tuple] = {}
    for i, path in enumerate(paths):
        key = _cache_key(path, trust[i])
        if key is None:
            results[i] = grading_failed(str(path), "cannot read: it is gone or unreadable")
            continue
        keys[i] = key
        if key in _reload_cache:
            results[i] = _reload_cache[key]
    for flag in (False, True):
        todo = [i for i in keys if i not in results and trust[i] == flag]
        answers = verify_many([paths[i] for i in todo], timeout=timeout, trust_pickled_module=flag, python=python)
        for i, res in zip(todo, answers):
            results[i] = res
            if "verifier exited" not in " ".join(res.get("problems") or []):
                _reload_cache[keys[i]] = res
    return [results[i] for i in range(len(paths))]
