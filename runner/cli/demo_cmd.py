"""`campaign demo [DIR] [--no-console]`: write the built-in demo campaign, start its runner and
open the console. An existing folder is reused only when it holds this same demo (re-running the
command reopens it); any other campaign there is never overwritten."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from runner.campaign.errors import CampaignError

CAMPAIGN_FILE = "campaign.toml"


def _same_demo(existing: Path, fresh: Path) -> bool:
    """Is the campaign file at `existing` the demo as `write_demo` writes it (the start time of the
    window aside, which `write_demo` takes from the clock)?"""

    def body(p: Path) -> list[str]:
        return [ln for ln in p.read_text(encoding="utf-8").splitlines() if not ln.strip().startswith("started_at")]

    try:
        return body(existing) == body(fresh)
    except OSError:
        return False


def prepare_demo(folder: Path, now: float | None = None) -> tuple[Path, bool]:
    """Write the demo into `folder` (or find it there); returns (campaign file, written now)."""
    from runner.demo import write_demo

    now = time.time() if now is None else now
    target = folder / CAMPAIGN_FILE
    if target.exists():
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(write_demo(Path(tmp) / "demo", now))
            fresh_file = fresh if fresh.is_file() else fresh / CAMPAIGN_FILE
            if not _same_demo(target, fresh_file):
                raise CampaignError(
                    "already holds a different campaign: not overwriting it; name another "
                    "folder, e.g. `campaign demo ./campaign-demo-2`",
                    file=target,
                )
        return target, False
    if folder.exists() and any(folder.iterdir()):
        raise CampaignError(
            "is not empty and holds no demo campaign: not writing into it; name a new folder", file=folder
        )
    written = Path(write_demo(folder, now))
    return (written if written.is_file() else written / CAMPAIGN_FILE), True


def cmd_demo(ns: argparse.Namespace) -> int:
    from runner.campaign.model import load_campaign
    from runner.daemon.control import ensure_running

    folder = Path(getattr(ns, "dir", None) or "campaign-demo").absolute()
    path, written = prepare_demo(folder)
    campaign = load_campaign(path)
    print(
        ("wrote the demo campaign to " if written else "reusing the demo campaign in ") + str(folder), file=sys.stderr
    )
    pong = ensure_running(campaign)
    print(f"its runner is running (pid {pong.get('pid')}); log: {campaign.state_dir / 'runner.log'}", file=sys.stderr)
    if getattr(ns, "no_console", False):
        print(f"open the console with `campaign console {folder}`; stop with `campaign down {folder}`", file=sys.stderr)
        return 0
    from runner.cli.console_cmd import open_console

    return open_console(campaign)
