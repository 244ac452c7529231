"""Test helpers for the unmodified-scripts example: a copy of `examples/unmodified/` in a throwaway
folder, set up the way a user would (their window's start, their Python), with the phase cut to the
variants a test needs and the scripts' own options changed only through the campaign file."""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

from tests.helpers_runner import iso

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "unmodified"
SCRIPTS = ("train_gpt.py", "mnist_like.py")


def copy_example(
    dest: Path,
    variants: list[str],
    *,
    args: dict[str, list[tuple[str, str]]] | None = None,
    started_at: float | None = None,
) -> Path:
    """`dest/campaign.toml` and the scripts from the example, with:
    - `started_at` an hour ago (the shipped date is a fixed example date);
    - "python" replaced by this interpreter (the one that has torch; the runner's PATH may not);
    - the "main runs" phase limited to `variants` (the runner launches exactly those at `up`);
    - `args[variant]`: (old, new) replacements inside that variant's command lines.
    Returns the campaign folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SCRIPTS:
        shutil.copy2(EXAMPLE / name, dest / name)
    text = (EXAMPLE / "campaign.toml").read_text(encoding="utf-8")
    start = time.time() - 3600 if started_at is None else started_at
    text, n = re.subn(r"(?m)^started_at = .*$", f"started_at = {iso(start)}", text)
    assert n == 1, "the example's [bundle] started_at line moved"
    text = text.replace('["python", ', f'["{sys.executable}", ')
    listed = ", ".join(f'"{v}"' for v in variants)
    text, n = re.subn(r'(?m)^variants = \["gpt-control", "mnist".*$', f"variants = [{listed}]", text)
    assert n == 1, "the example's main-runs phase line moved"
    for variant, pairs in (args or {}).items():
        text = _edit_variant_commands(text, variant, pairs)
    (dest / "campaign.toml").write_text(text, encoding="utf-8")
    return dest


def _edit_variant_commands(text: str, variant: str, pairs: list[tuple[str, str]]) -> str:
    head = f'name = "{variant}"'
    at = text.index(head)
    end = text.find("[[", at)
    end = len(text) if end < 0 else end
    block = text[at:end]
    for old, new in pairs:
        assert old in block, f"{old!r} not in the {variant} variant"
        block = block.replace(old, new)
    return text[:at] + block + text[end:]


def log_lines(run_dir: Path) -> list[str]:
    try:
        return (Path(run_dir) / "output.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
