"""The built-in demo campaign that `campaign demo` writes: files, not code paths of their own.

`write_demo(dir, now)` writes `campaign.toml` (from `campaign_template.toml`), copies `train.py`
beside it (variants run it from the campaign folder with this very interpreter, written as an
absolute path so the runner needs no PATH lookup), and writes the fixed corpus into `data/`.
The window is back-dated: a 3-day bundle that started 72 h minus 25 min before `now`.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import string
import sys
import time
from pathlib import Path

from runner.demo.corpus import write_corpus

HERE = Path(__file__).resolve().parent
WINDOW_LEFT_MINUTES = 25
DAYS = 3


def started_at_for(now: float) -> str:
    """The window's start as a TOML datetime so that it expires WINDOW_LEFT_MINUTES after `now`."""
    start = (
        dt.datetime.fromtimestamp(int(now), dt.UTC)
        - dt.timedelta(days=DAYS)
        + dt.timedelta(minutes=WINDOW_LEFT_MINUTES)
    )
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def campaign_text(now: float, python: str | None = None) -> str:
    template = string.Template((HERE / "campaign_template.toml").read_text(encoding="utf-8"))
    return template.substitute(started_at=started_at_for(now), python=json.dumps(python or sys.executable))


def write_demo(dir: Path, now: float | None = None) -> Path:
    """Writes the demo campaign into `dir` (created if needed); returns the campaign file's path."""
    now = time.time() if now is None else now
    folder = Path(dir).absolute()
    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder / "data")
    shutil.copyfile(HERE / "train.py", folder / "train.py")
    path = folder / "campaign.toml"
    path.write_text(campaign_text(now), encoding="utf-8")
    return path
