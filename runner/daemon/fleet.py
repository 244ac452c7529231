"""The user's side of a campaign over several hosts: one runner per declared host, over OpenSSH.

Each host keeps its own runner, which judges its own runs with no need of the network; this side
drives them all. Per host: one ControlMaster connection (`runner.remote.ssh.Session`) and one
forwarded socket (`ssh -O forward -L LOCAL:REMOTE`): LOCAL is `.campaign/runner.sock` of a short
local folder, so the ordinary client talks to the remote runner as to a local one. Both go when
the `Fleet` is closed. A host that cannot be reached is recorded with the time it was first found
so (`.campaign/hosts/NAME.json` of the local folder) until it answers again; a request routed to
it is refused with that reason, never queued.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.campaign.errors import CampaignError, RunnerUnavailable
from runner.campaign.host_plan import placement
from runner.campaign.hosts import DEFAULT_COMMAND, Host
from runner.campaign.model import CAMPAIGN_FILE
from runner.campaign.objects import Campaign
from runner.campaign.statedir import StatePaths, paths_for
from runner.daemon import client
from runner.remote.ssh import RemoteError, Session

SSH_CONFIG_ENV = "CAMPAIGN_SSH_CONFIG"  # an ssh config file for every host (as `ssh -F`)
REQUEST_TIMEOUT_S = 10.0
# a dead link is noticed in seconds, not at TCP's pace; first values win over the user's config
LINK_OPTIONS = ("-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3")


# the parts of a host's snapshot its entry in `hosts` carries
HOST_KEYS = ("runner", "bundle", "gpus", "slots", "queue", "nvml_error")


def tagged(host: str, run: dict[str, Any]) -> dict[str, Any]:
    """A host's run as the merged status lists it: with its `host` and `key` (`host/id`)."""
    return {**run, "host": host, "key": f"{host}/{run['id']}"}


class HostUnreachable(Exception):
    """A host did not answer over SSH; the message says which, since when and why."""


@dataclass(frozen=True)
class HostResult:
    host: str
    ok: bool
    text: str


@dataclass(frozen=True)
class HostState:
    host: str
    reachable: bool
    since: float | None = None  # first failure of the current outage
    error: str | None = None


def link_failed(exc: RemoteError) -> bool:
    """Whether the host could not be reached (as against a command there that failed)."""
    text = str(exc)
    return text.startswith("cannot reach") or "did not finish within" in text or "cannot forward" in text


def fmt_since(since: float, now: float | None = None) -> str:
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(since))
    return f"{stamp} UTC ({int(max(0.0, now - since))} s ago)"


@dataclass
class Link:
    """One host: its session (one ControlMaster) and, once asked for, its forwarded socket."""

    host: Host
    session: Session
    local: StatePaths  # a local folder whose .campaign/runner.sock is the forward
    remote_dir: str | None = None  # the campaign folder there, absolute
    forwarded: bool = False

    def resolve_dir(self, create: bool = False) -> str:
        """The host's campaign folder as an absolute path (`~` expanded there)."""
        if self.remote_dir is None:
            script = 'd="$1"; case "$d" in "~") d="$HOME";; "~/"*) d="$HOME/${d#\\~/}";; esac; '
            script += 'mkdir -p "$d" && ' if create else ""
            script += 'cd "$d" && pwd -P'
            out = self.session.run(["sh", "-c", script, "sh", self.host.dir], timeout=30).stdout
            self.remote_dir = out.decode().strip().splitlines()[-1]
        return self.remote_dir

    def forward(self) -> StatePaths:
        """The local end of the host's runner socket: one forward, on the host's one master
        (which the forward's own `ssh -f -N` opens when there is none yet)."""
        if not self.forwarded:
            if self.remote_dir is None and self.host.dir.startswith("/"):
                self.remote_dir = self.host.dir.rstrip("/") or "/"  # absolute: no round trip to ask
            remote_sock = f"{self.resolve_dir()}/.campaign/runner.sock"
            self.local.ensure()
            try:
                self.local.socket.unlink()
            except FileNotFoundError:
                pass
            spec = ["-L", f"{self.local.socket}:{remote_sock}"]
            if self._ssh(["-O", "check"]).returncode == 0:
                proc = self._ssh(["-O", "forward", *spec])
            else:
                proc = self._ssh(["-f", "-N", "-o", "ExitOnForwardFailure=yes", *spec], timeout=60)
            if proc.returncode != 0:
                why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
                if proc.returncode == 255 and not self.local.socket.exists():
                    raise RemoteError(f"cannot reach {self.host.name} over ssh: {why[-1] if why else 'ssh failed'}")
                raise RemoteError(f"cannot forward the runner's socket of {self.host.name}: {' '.join(why)}")
            self.forwarded = True
        return self.local

    def _ssh(self, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["ssh", *self.session.ssh_options(), *args, self.session.host],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RemoteError(f"cannot reach {self.host.name} over ssh: no answer within {timeout:g} s") from None

    def drop(self) -> None:
        """Forget the master and the forward (after a failure: the next call makes new ones)."""
        self.session.close()
        self.forwarded = False
        try:
            self.local.socket.unlink()
        except FileNotFoundError:
            pass


@dataclass
class Fleet:
    """Every declared host of `campaign`, reached from the user's side. A context manager."""

    campaign: Campaign
    links: dict[str, Link] = field(default_factory=dict)
    _tmp: str = ""
    _placement: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.campaign.hosts:
            raise CampaignError("declares no [[host]] table: this is a one-host campaign", file=self.campaign.path)
        # Unix socket paths are short (108 bytes): the forwards live in a short folder of our own
        self._tmp = tempfile.mkdtemp(prefix="cc-fleet-", dir="/tmp" if os.path.isdir("/tmp") else None)
        base = list(LINK_OPTIONS)
        if os.environ.get(SSH_CONFIG_ENV):
            base = ["-F", os.environ[SSH_CONFIG_ENV], *base]
        for h in self.campaign.hosts:
            opts = [*base, *(["-p", str(h.port)] if h.port else [])]
            remote = None if h.campaign == DEFAULT_COMMAND else h.campaign
            session = Session(h.ssh, opts, remote_campaign=remote)
            self.links[h.name] = Link(h, session, StatePaths(Path(self._tmp) / h.name))

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for link in self.links.values():
            link.drop()
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- reachability -------------------------------------------------------------------------
    def _mark_file(self, name: str) -> Path:
        return paths_for(self.campaign).dir / "hosts" / f"{name}.json"

    def state(self, name: str) -> HostState:
        try:
            data = json.loads(self._mark_file(name).read_text())
        except (FileNotFoundError, ValueError):
            return HostState(name, True)
        return HostState(name, False, data.get("since"), data.get("error"))

    def _unreachable(self, name: str, error: str) -> HostUnreachable:
        old = self.state(name)
        since = old.since if not old.reachable and old.since else time.time()
        path = self._mark_file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"since": since, "error": error}))
        tmp.replace(path)
        self.links[name].drop()
        return HostUnreachable(f"host {name} unreachable since {fmt_since(since)}: {error}")

    def _reached(self, name: str) -> None:
        try:
            self._mark_file(name).unlink()
        except FileNotFoundError:
            pass

    # -- requests -----------------------------------------------------------------------------
    def request(self, name: str, op: str, **args: Any) -> Any:
        """One request to host `name`'s runner through its forward; HostUnreachable when the host
        does not answer, RunnerUnavailable when it does but its runner is not running."""
        link = self.links[name]
        try:
            local = link.forward()
            result = client.request(local, op, timeout=REQUEST_TIMEOUT_S, **args)
        except RemoteError as exc:
            if not link_failed(exc):
                raise CampaignError(f"host {name}: {exc}", file=self.campaign.path) from None
            raise self._unreachable(name, str(exc)) from None
        except client.RequestFailed as exc:
            if "did not answer" in str(exc):
                raise self._unreachable(name, f"no answer within {REQUEST_TIMEOUT_S:g} s") from None
            self._reached(name)
            raise
        except RunnerUnavailable:
            if not self._host_answers(link):
                raise self._unreachable(name, "the SSH connection dropped") from None
            self._reached(name)
            link.drop()
            raise RunnerUnavailable(
                f"host {name} answers but its runner is not running: `campaign up {self.campaign.path}` starts it"
            ) from None
        self._reached(name)
        return result

    def _host_answers(self, link: Link) -> bool:
        try:
            link.session.run("true", timeout=15)
            return True
        except RemoteError:
            return False

    # -- up / down ----------------------------------------------------------------------------
    def _each(self, job) -> dict[str, HostResult]:
        """`job(name, link)` on every host side by side; a host that cannot be reached is
        recorded so and said so, the others go on."""

        def one(name: str) -> HostResult:
            link = self.links[name]
            try:
                text = job(name, link)
            except RemoteError as exc:
                if link_failed(exc):
                    return HostResult(name, False, str(self._unreachable(name, str(exc))))
                return HostResult(name, False, f"failed: {exc}")
            self._reached(name)
            return HostResult(name, True, text)

        with ThreadPoolExecutor(max_workers=len(self.links)) as pool:
            return {r.host: r for r in pool.map(one, self.links)}

    def up(self) -> dict[str, HostResult]:
        """Send the campaign file where it differs, then start each host's runner."""
        text = self.campaign.path.read_bytes()
        digest = hashlib.sha256(text).hexdigest()

        def job(name: str, link: Link) -> str:
            folder = link.resolve_dir(create=True)
            target = f"{folder}/{CAMPAIGN_FILE}"
            have = link.session.run(
                ["sh", "-c", 'sha256sum "$1" 2>/dev/null || true', "sh", target], timeout=30
            ).stdout.decode()
            sent = have.split()[:1] != [digest]
            if sent:
                tmp = f"{folder}/.{CAMPAIGN_FILE}.sending"
                link.session.run(["sh", "-c", 'cat > "$1" && mv "$1" "$2"', "sh", tmp, target], input=text)
            said = link.session.campaign(["up", "--host", name, folder], folder, timeout=120)
            return ("campaign file sent; " if sent else "campaign file unchanged; ") + said.decode().strip()

        return self._each(job)

    def down(self, *, abort_runs: bool = False) -> dict[str, HostResult]:
        def job(name: str, link: Link) -> str:
            folder = link.resolve_dir()
            args = ["down", folder, *(["--abort-runs"] if abort_runs else [])]
            return link.session.campaign(args, folder, timeout=120).decode().strip()

        return self._each(job)

    # -- status and routing -------------------------------------------------------------------
    def status(self) -> dict:
        """Every host's snapshot merged: `hosts` (reachability, bundle, GPUs, slots, runner) and
        `runs`, each with its `host` and `key` (`host/id`: one configuration has one id on two hosts)."""
        now = time.time()
        hosts, runs = [], []
        with ThreadPoolExecutor(max_workers=len(self.links)) as pool:  # hosts answer side by side
            for entry, host_runs in pool.map(self._host_status, self.links):
                hosts.append(entry)
                runs.extend(host_runs)
        return {**self.head(now, hosts), "runs": runs}

    def head(self, now: float, hosts: list[dict[str, Any]]) -> dict[str, Any]:
        """The merged status without its runs: `now`, `campaign`, `hosts`, `placement`."""
        c = self.campaign
        if self._placement is None:  # the campaign's, fixed: laid out once, not at every poll
            self._placement = placement(c)
        return {
            "now": now,
            "campaign": {"name": c.name, "question": c.question, "root": str(c.root), "file": str(c.path)},
            "hosts": hosts,
            "placement": self._placement,
        }

    def _host_status(self, name: str) -> tuple[dict[str, Any], list[dict]]:
        entry, snap = self.host_status(name)
        return entry, [tagged(name, run) for run in (snap or {}).get("runs") or []]

    def host_status(self, name: str, **args: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Host `name`'s entry of `hosts` (reachability; bundle, GPUs, slots, queue and runner when
        its runner answers) and the runner's `status` reply (`args`: `since` and `epoch` ask for
        what changed), or None when none came."""
        link = self.links[name]
        entry: dict[str, Any] = {"host": name, "ssh": link.host.ssh, "dir": link.host.dir}
        try:
            snap = self.request(name, "status", **args)
        except HostUnreachable as exc:
            st = self.state(name)
            entry.update(reachable=False, unreachable_since=st.since, error=str(exc), runner=None)
            return entry, None
        except (RunnerUnavailable, CampaignError) as exc:
            entry.update(reachable=True, unreachable_since=None, error=str(exc), runner=None)
            return entry, None
        entry.update(reachable=True, unreachable_since=None, error=None)
        for key in HOST_KEYS:
            entry[key] = snap.get(key)
        return entry, snap

    def start(self, variant: str) -> tuple[str, Any]:
        """Start `variant` on the host it is placed on; refused (HostUnreachable) when that host
        does not answer: nothing is queued anywhere."""
        try:
            self.campaign.variant(variant)
        except KeyError:
            names = ", ".join(v.name for v in self.campaign.variants)
            raise CampaignError(
                f"variant {variant!r} is not declared in the campaign file (declared: {names})", file=self.campaign.path
            ) from None
        name = placement(self.campaign)[variant]
        try:
            return name, self.request(name, "start", variant=variant)
        except HostUnreachable as exc:
            raise HostUnreachable(f"start {variant} refused, nothing queued: {exc}") from None

    def route(self, run: str) -> tuple[str, str]:
        """`HOST/RUN` as given, or the host that holds RUN (asked of every reachable host)."""
        if "/" in run:
            name, _, rid = run.partition("/")
            if name not in self.links:
                raise CampaignError(f"no host {name!r} (declared: {', '.join(self.links)})", file=self.campaign.path)
            return name, rid
        found = []
        for name in self.links:
            try:
                snap = self.request(name, "status")
            except (HostUnreachable, RunnerUnavailable):
                continue
            if any(r["id"] == run for r in snap.get("runs") or []):
                found.append(name)
        if len(found) == 1:
            return found[0], run
        if not found:
            raise CampaignError(f"no reachable host holds run {run!r} (see `campaign status`)", file=self.campaign.path)
        raise CampaignError(f"run {run!r} exists on {', '.join(found)}: name it as HOST/{run}", file=self.campaign.path)
