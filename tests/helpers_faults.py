"""Helpers for the fault-injection suite (pytest marker `faults`): a small tmpfs to fill (ENOSPC
for real, as root), and the figures the suite prints at the end (faults injected, runs checked,
records lost)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

FIGURES = {"faults injected": 0, "runs checked": 0, "records lost": 0}
NOTES: list[str] = []


def can_mount() -> str | None:
    """None when this process may mount a tmpfs; else why not (the skip's reason)."""
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs and fill it (ENOSPC for real)"
    if shutil.which("mount") is None:
        return "no mount command on this host"
    return None


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path) -> Path:
    """Fill the file system holding `path` until it answers ENOSPC (big writes, then small)."""
    filler = path / "filler.bin"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12, 1):
            block = b"\0" * chunk
            while True:
                try:
                    f.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return filler


def campaign_toml(root: Path, variants: list[tuple[str, list[str], str]], *, started_at: str, days: int = 3) -> Path:
    """campaign.toml with variants given as (name, argv, extra toml lines); no phase, one rule."""
    parts = [
        f'[campaign]\nname = "t"\nquestion = "q"\n\n[bundle]\ngpu = "RTX 4090"\ndays = {days}\n'
        f"started_at = {started_at}\nretrieval_hours = 2\n"
    ]
    for name, argv, extra in variants:
        cmd = ", ".join(f'"{a}"' for a in argv)
        parts.append(f'[[variant]]\nname = "{name}"\ncategory = "essential"\ncommand = [{cmd}]\nhours = 1\n{extra}')
    parts.append('[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n')
    root.mkdir(parents=True, exist_ok=True)
    path = root / "campaign.toml"
    path.write_text("\n".join(parts))
    return path


def script(root: Path, name: str, body: str) -> list[str]:
    """A training script in the campaign folder; returns its argv."""
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(textwrap.dedent(body))
    return [sys.executable, name]


def metric_lines(run_dir: Path) -> int:
    try:
        return sum(1 for line in (run_dir / "metrics.jsonl").read_bytes().splitlines() if line.strip())
    except OSError:
        return 0


def check_recorded(conn, run_id: str, *, expect_lines: int | None = None) -> int:
    """Records lost for one ended run: its end event missing counts 1, and each metric line the
    run folder holds that the ledger did not count."""
    from runner.ledger import store as L

    FIGURES["runs checked"] += 1
    run = L.get_run(conn, run_id)
    lost = 0
    ends = [e for e in L.events(conn, run_id=run_id, limit=1000) if e["kind"] == run.state]
    if run.state in ("finished", "failed", "stopped", "aborted", "refused") and not ends:
        lost += 1
    if expect_lines is not None:
        got = (L.progress(conn).get(run_id) or {}).get("lines") or 0
        lost += max(0, expect_lines - got)
    FIGURES["records lost"] += lost
    return lost
