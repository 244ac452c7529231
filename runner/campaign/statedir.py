"""Where the runner keeps its state: `.campaign/` inside the campaign folder (docs/INTERNALS.md).

One small module so the CLI, the console's client and the runner agree on the paths without
importing each other.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_NAME = ".campaign"
# sun_path holds 108 bytes with its final NUL: a longer socket path cannot be bound at all
MAX_SOCKET_PATH_BYTES = 107


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
        """Where the runner's socket is: `.campaign/runner.sock`, unless the runner had to put it
        elsewhere (a folder path too long for a Unix socket, a file system that cannot hold one)
        and left `.campaign/runner.sock.where` naming the place. Every client reads it here."""
        try:
            where = self.socket_pointer.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return self.default_socket
        return Path(where) if where else self.default_socket

    @property
    def default_socket(self) -> Path:
        return self.dir / "runner.sock"

    @property
    def socket_pointer(self) -> Path:
        return self.dir / "runner.sock.where"

    def default_socket_fits(self) -> bool:
        return len(os.fsencode(self.default_socket)) <= MAX_SOCKET_PATH_BYTES

    def fallback_socket(self) -> Path:
        """A short path where a socket can live: `$XDG_RUNTIME_DIR/campaign/<hash>.sock`, else
        `/tmp/campaign-<uid>/<hash>.sock`, in a 0700 folder this user owns (checked, never a
        folder someone else prepared). The hash is of the campaign folder's path."""
        name = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:20] + ".sock"
        tried = []
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isabs(runtime):
            tried.append(Path(runtime) / "campaign")
        tried.append(Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}")
        tried.append(Path("/tmp") / f"campaign-{os.getuid()}")
        problems = []
        for folder in tried:
            path = folder / name
            if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
                problems.append(f"{folder}: path too long")
                continue
            try:
                _private_dir(folder)
            except OSError as exc:
                problems.append(f"{folder}: {exc.strerror or exc}")
                continue
            return path
        raise OSError(f"no place for the runner's socket: {'; '.join(problems)}")

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


def _private_dir(folder: Path) -> None:
    """Create `folder` 0700, or accept it only if it is a real folder of ours, closed to others."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(1, "exists and is not a folder of this user")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)


def paths_for(campaign_or_root: object) -> StatePaths:
    """StatePaths from a Campaign (its `root`), a campaign folder, or a campaign.toml path."""
    if isinstance(campaign_or_root, StatePaths):
        return campaign_or_root
    if isinstance(campaign_or_root, (str, os.PathLike)):  # a Path's own `.root` is "/": not ours
        p = Path(campaign_or_root).absolute()
        return StatePaths(p.parent if p.suffix == ".toml" else p)
    return StatePaths(Path(campaign_or_root.root).absolute())  # type: ignore[attr-defined]
