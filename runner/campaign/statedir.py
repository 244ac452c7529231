"""Where the runner keeps its state: `.campaign/` inside the campaign folder (CONTRACT.md).

One small module so the CLI, the console's client and the runner agree on the paths without
importing each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_NAME = ".campaign"


@dataclass(frozen=True)
class StatePaths:
    root: Path  # the campaign folder

    @property
    def dir(self) -> Path:
        return self.root / STATE_DIR_NAME

    @property
    def ledger(self) -> Path:
        return self.dir / "ledger.sqlite"

    @property
    def socket(self) -> Path:
        return self.dir / "runner.sock"

    @property
    def pid(self) -> Path:
        return self.dir / "runner.pid"

    @property
    def log(self) -> Path:
        return self.dir / "runner.log"

    @property
    def lock(self) -> Path:
        return self.dir / "runner.lock"

    def ensure(self) -> Path:
        """Create `.campaign/` 0700 (and tighten it if it exists looser)."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (self.dir.stat().st_mode & 0o777) != 0o700:
            os.chmod(self.dir, 0o700)
        return self.dir


def paths_for(campaign_or_root: object) -> StatePaths:
    """StatePaths from a Campaign (its `root`), a campaign folder, or a campaign.toml path."""
    if isinstance(campaign_or_root, StatePaths):
        return campaign_or_root
    if isinstance(campaign_or_root, (str, os.PathLike)):  # a Path's own `.root` is "/": not ours
        p = Path(campaign_or_root).absolute()
        return StatePaths(p.parent if p.suffix == ".toml" else p)
    return StatePaths(Path(campaign_or_root.root).absolute())  # type: ignore[attr-defined]
