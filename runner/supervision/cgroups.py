"""Process tracking through cgroups: each run's processes in a cgroup of their own.

A process that leaves its process group (`setsid`) and double-forks is invisible to a walk of the
process tree once the subreaper that held it (the run's supervisor) is gone. A cgroup holds every
process forked inside it whatever it does with sessions and parents, the way Slurm's cgroup
process tracking does: the runner can then find and stop a lost supervisor's whole run.

At runner start `detect` picks the first that works of: cgroup v2 (the unified hierarchy at
/sys/fs/cgroup, a subtree under the runner's own cgroup), cgroup v1 `freezer`, the v2 hierarchy of
a hybrid host (/sys/fs/cgroup/unified), cgroup v1 `pids`; each is proven with a real process before
it is used. Else the subreaper and `tree.json` stay the only tracking, with the reason kept for
`status`. `CAMPAIGN_PROCESS_TRACKING` = auto | cgroup-v2 | cgroup-v1 | cgroup-v1-pids | subreaper
chooses instead.

Layout: `<hierarchy>/<runner's cgroup>/campaign-<hash of the campaign folder>/<run>.a<attempt>`.
The runner creates a run's cgroup before launching its supervisor; the supervisor moves itself in
before it starts the training process, so everything the run forks is born inside. `stop_group`
empties a cgroup (SIGTERM, the grace, then freeze + SIGKILL + thaw until empty, or `cgroup.kill`)
and removes it.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
ENV = "CAMPAIGN_PROCESS_TRACKING"
THE_GAP = "the gap: a process that double-forks after the supervisor is lost escapes"
PROBE = ".probe"


class Mode(enum.StrEnum):
    V2 = "cgroup v2"
    V1_FREEZER = "cgroup v1 (freezer)"
    V1_PIDS = "cgroup v1 (pids)"
    NONE = "subreaper + tree.json"


class CgroupError(OSError):
    """A cgroup could not be created, joined or emptied (the reason is the message)."""


@dataclass(frozen=True)
class Tracking:
    """How this runner tracks runs' processes; `root` is the campaign's cgroup (None: no cgroups)."""

    mode: Mode
    root: Path | None = None
    reason: str = ""  # why cgroups are not used (mode NONE), or what was skipped to get here

    @property
    def active(self) -> bool:
        return self.root is not None

    def describe(self) -> str:
        """What `status` shows as `runner.process_tracking`."""
        if self.root is None:
            return f"{Mode.NONE} — {THE_GAP} (cgroups are not used: {self.reason})"
        how = {
            "cgroup.kill": "cgroup.kill",
            "pids.max": "pids.max = 0 so none can fork, then SIGKILL",
        }.get(str(_killer(self.root)), "frozen, SIGKILL, thawed")
        return (
            f"{self.mode}: each run in its own cgroup under {self.root}; a lost supervisor's processes, "
            f"setsid'd and double-forked ones too, are stopped ({how}) and the cgroup removed"
        )

    def path_for(self, run_id: str, attempt: int) -> Path | None:
        if self.root is None:
            return None
        return self.root / run_cgroup_name(run_id, attempt)

    def prepare(self, run_id: str, attempt: int) -> Path | None:
        """Create the cgroup of one attempt (emptied first if an earlier runner left it)."""
        if self.root is None:
            return None
        path = self.root / run_cgroup_name(run_id, attempt)
        if path.is_dir():
            stop_group(path, 0.0)
        try:
            self.root.mkdir(exist_ok=True)
            path.mkdir()
        except OSError as exc:
            raise CgroupError(exc.errno, f"cannot create the cgroup {path}: {exc.strerror or exc}") from None
        return path

    def leftovers(self, keep: Iterable[Path]) -> list[Path]:
        """Run cgroups under this campaign's not in `keep` (a crashed runner's, ended runs')."""
        if self.root is None or not self.root.is_dir():
            return []
        kept = {Path(p) for p in keep}
        return sorted(p for p in self.root.iterdir() if p.is_dir() and p not in kept)

    def remove_root(self) -> None:
        """The campaign's cgroup, when no run is left in it (the runner stops)."""
        if self.root is not None:
            remove(self.root, tries=1)


def run_cgroup_name(run_id: str, attempt: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:80].lstrip(".") or "run"
    if safe != run_id:
        safe += "-" + hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"{safe}.a{int(attempt)}"


def campaign_cgroup_name(campaign_root: Path) -> str:
    return "campaign-" + hashlib.sha256(str(Path(campaign_root).resolve()).encode()).hexdigest()[:12]


# -- detection ------------------------------------------------------------------------------------


def _own_path(controller: str | None, proc_cgroup: str) -> str | None:
    """This process's cgroup in one hierarchy, from /proc/self/cgroup (None: not mounted)."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        if controller is None and parts[0] == "0" and ctrls == "":
            return path
        if controller is not None and controller in ctrls.split(","):
            return path
    return None


def _base(mount: Path, own: str | None) -> Path:
    """Where campaign cgroups go: under our own cgroup, or the mount's root when our own path is not
    visible there (a container without a cgroup namespace shows the host's path)."""
    if own:
        candidate = mount / own.lstrip("/")
        if candidate.is_dir():
            return candidate
    return mount


def _candidates(proc_cgroup: str, root: Path) -> list[tuple[Mode, Path | None, str]]:
    """(mode, base folder or None, why not) for each kind of cgroup, in order of preference."""
    out: list[tuple[Mode, Path | None, str]] = []
    own2 = _own_path(None, proc_cgroup)
    if (root / "cgroup.controllers").exists():
        out.append((Mode.V2, _base(root, own2), ""))
        return out  # a unified host has no v1 hierarchies
    for mode, ctrl in ((Mode.V1_FREEZER, "freezer"), (Mode.V1_PIDS, "pids")):
        mount = root / ctrl
        if (mount / "cgroup.procs").exists():
            out.append((mode, _base(mount, _own_path(ctrl, proc_cgroup)), ""))
        else:
            out.append((mode, None, f"no {ctrl} hierarchy at {mount}"))
    hybrid = root / "unified"
    if (hybrid / "cgroup.procs").exists():  # a hybrid host's v2 tree: no controllers, but kill/freeze
        out.insert(1, (Mode.V2, _base(hybrid, own2), ""))
    if not out or all(base is None for _, base, _ in out):
        out.append((Mode.V2, None, f"no cgroup file system at {root}"))
    return out


def detect(campaign_root: Path, env: Mapping[str, str] | None = None, cgroup_root: Path = CGROUP_ROOT) -> Tracking:
    """The tracking this host allows, each kind proven on a real process; the reasons when none."""
    env = os.environ if env is None else env
    choice = (env.get(ENV) or "auto").strip().lower()
    if choice == "subreaper":
        return Tracking(Mode.NONE, reason=f"{ENV}=subreaper")
    if not Path("/proc/self/cgroup").exists():
        return Tracking(Mode.NONE, reason="this system has no cgroups (no /proc/self/cgroup)")
    try:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    except OSError as exc:
        return Tracking(Mode.NONE, reason=f"/proc/self/cgroup cannot be read: {exc.strerror or exc}")
    wanted = {
        "auto": None,
        "cgroup": None,
        "cgroup-v2": {Mode.V2},
        "cgroup-v1": {Mode.V1_FREEZER},
        "cgroup-v1-pids": {Mode.V1_PIDS},
    }
    if choice not in wanted:
        return Tracking(Mode.NONE, reason=f"{ENV}={choice!r} is none of {', '.join([*wanted, 'subreaper'])}")
    allowed = wanted[choice]
    reasons: list[str] = []
    name = campaign_cgroup_name(campaign_root)
    for mode, base, why in _candidates(proc_cgroup, cgroup_root):
        if allowed is not None and mode not in allowed:
            continue
        if base is None:
            reasons.append(why)
            continue
        try:
            _prove(base / name)
        except OSError as exc:
            reasons.append(f"{mode} at {base}: {_explain(exc)}")
            continue
        return Tracking(mode, base / name, "; ".join(reasons))
    return Tracking(Mode.NONE, reason="; ".join(reasons) or f"no cgroup of the kind {ENV}={choice} asks for")


def campaign_cgroups(campaign_root: Path, cgroup_root: Path = CGROUP_ROOT) -> list[Path]:
    """The campaign's cgroup in each hierarchy where one exists (clean-up after a killed runner)."""
    try:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        return []
    name = campaign_cgroup_name(campaign_root)
    return [base / name for _, base, _ in _candidates(proc_cgroup, cgroup_root) if base and (base / name).is_dir()]


def _explain(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "the cgroup file system is read-only (a container?)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "no permission to create or join a cgroup there (not root, and not delegated to this user)"
    return str(exc.strerror or exc) if not isinstance(exc, CgroupError) else str(exc)


def _prove(campaign_dir: Path) -> None:
    """Create the campaign's cgroup, move a sleeping process into a child of it, stop it there and
    remove the child: the whole of what runs will need, done once."""
    created = False
    try:
        campaign_dir.mkdir()
        created = True
    except FileExistsError:
        pass  # a previous runner's: adopted (its leftovers are swept after the rebuild)
    probe = campaign_dir / PROBE
    sleeper: subprocess.Popen | None = None
    try:
        if probe.is_dir():
            stop_group(probe, 0.0)
        probe.mkdir()
        sleeper = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, close_fds=True)
        _write(probe / "cgroup.procs", str(sleeper.pid))
        if sleeper.pid not in members(probe):
            raise CgroupError(errno.EIO, "a process written to cgroup.procs did not show in it")
        if _killer(probe) is None:
            raise CgroupError(errno.ENOTSUP, "neither freezer.state, cgroup.freeze, cgroup.kill nor pids.max")
        res = stop_group(probe, 0.0, kill_timeout=3.0)
        if res.survivors or not res.removed:
            raise CgroupError(errno.EBUSY, f"the probe's cgroup could not be emptied and removed ({res.survivors})")
    except OSError:
        if sleeper is not None:
            sleeper.kill()
        remove(probe, tries=5)
        if created:
            remove(campaign_dir, tries=1)
        raise
    finally:
        if sleeper is not None:
            sleeper.wait()


# -- one cgroup -----------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def members(path: Path) -> list[int]:
    """The pids (processes, not threads) in a cgroup; [] once it is gone."""
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def join(path: Path) -> None:
    """Move this process into `path`; what it forks afterwards is born there."""
    try:
        _write(path / "cgroup.procs", str(os.getpid()))
    except OSError as exc:
        raise CgroupError(exc.errno, f"cannot join the cgroup {path}: {exc.strerror or exc}") from None


def remove(path: Path, tries: int = 50) -> bool:
    """rmdir an empty cgroup (the kernel may still hold it for a moment after the last exit)."""
    for i in range(max(1, tries)):
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if i + 1 < tries:
                time.sleep(0.01)
    return False


def _killer(path: Path) -> str | None:
    """How this cgroup is emptied without a fork escaping: the first of these it has."""
    for name in ("cgroup.kill", "freezer.state", "cgroup.freeze", "pids.max"):
        if (path / name).exists():
            return name
    return None


@dataclass
class GroupStop:
    term_at: float | None = None
    kill_at: float | None = None
    gone_at: float | None = None
    killed: int = 0  # processes that needed SIGKILL
    survivors: list[int] = field(default_factory=list)
    removed: bool = False


def _signal(pids: Iterable[int], sig: int) -> int:
    n = 0
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            os.kill(pid, sig)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def _others(path: Path) -> list[int]:
    me = os.getpid()
    return [p for p in members(path) if p != me]


def stop_group(path: Path, grace: float, *, kill_timeout: float = 10.0, poll: float = 0.02) -> GroupStop:
    """Empty a cgroup and remove it: SIGTERM to every process in it and up to `grace` seconds to
    leave (a checkpoint saved on SIGTERM), then SIGKILL with no fork escaping — `cgroup.kill`, or
    the cgroup frozen while each is signalled, then thawed so the kill lands — until it is empty."""
    res = GroupStop()
    if not path.is_dir():
        res.removed = True
        return res
    if grace > 0 and _others(path):
        res.term_at = time.time()
        signalled: set[int] = set()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            fresh = [p for p in _others(path) if p not in signalled]
            _signal(fresh, signal.SIGTERM)
            signalled.update(fresh)
            if not _others(path):
                break
            time.sleep(poll)
    killer = _killer(path)
    deadline = time.monotonic() + kill_timeout
    while _others(path):
        if res.kill_at is None:
            res.kill_at = time.time()
            res.killed = len(_others(path))
        try:
            _kill_round(path, killer)
        except FileNotFoundError:
            break
        except OSError:
            _signal(_others(path), signal.SIGKILL)
        if time.monotonic() > deadline:
            res.survivors = _others(path)
            break
        time.sleep(0.005)
    if not res.survivors:
        res.gone_at = time.time()
        res.removed = os.getpid() not in members(path) and remove(path)
    return res


def _kill_round(path: Path, killer: str | None) -> None:
    if killer == "cgroup.kill":
        _write(path / "cgroup.kill", "1")
        return
    if killer == "pids.max":
        _write(path / "pids.max", "0")  # no fork succeeds any more
        _signal(_others(path), signal.SIGKILL)
        return
    if killer == "freezer.state":
        freeze, thaw, done = "FROZEN", "THAWED", lambda: (path / "freezer.state").read_text().strip() == "FROZEN"
    elif killer == "cgroup.freeze":
        freeze, thaw, done = "1", "0", lambda: "frozen 1" in (path / "cgroup.events").read_text()
    else:
        _signal(_others(path), signal.SIGKILL)
        return
    _write(path / killer, freeze)
    until = time.monotonic() + 1.0
    while not done() and time.monotonic() < until:
        time.sleep(0.002)
    try:
        _signal(_others(path), signal.SIGKILL)  # frozen: no pid exits or is reused meanwhile
    finally:
        _write(path / killer, thaw)  # the kills land once thawed
