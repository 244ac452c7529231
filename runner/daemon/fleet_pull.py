"""`campaign pull FILE [DEST]` for a campaign over several hosts: every host into `DEST/<host>/`.

Per host, over that host's one SSH master: the ordinary pull (its retrieval list, copy, every
sha256 checked, the verified retrieval recorded there), then a consistent snapshot of its ledger
(`campaign ledger-snapshot` there: `VACUUM INTO`, never a copy of a live WAL file), fetched to
`DEST/.campaign/hosts/<host>.ledger.sqlite` with its paths moved to `DEST/<host>/`. The campaign file is
copied to `DEST/` (unless DEST is its own folder), so `campaign report DEST` reports across hosts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.campaign.model import CAMPAIGN_FILE
from runner.closing.hosts_report import host_ledger
from runner.daemon.fleet import Fleet, link_failed
from runner.ledger.snapshot import rebase_paths
from runner.remote.pull import PullResult, pull, report_lines
from runner.remote.ssh import Address, RemoteError

SNAPSHOT_NAME = "ledger-snapshot.sqlite"  # on the host, in .campaign/, removed once fetched


@dataclass
class HostPull:
    host: str
    result: PullResult | None
    ledger: Path | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok and self.ledger is not None


def pull_hosts(fleet: Fleet, dest: Path, say: Callable[[str], object] = print) -> list[HostPull]:
    """Each host in turn (a slow link never mixes its lines with another's)."""
    dest.mkdir(parents=True, exist_ok=True)
    campaign = fleet.campaign
    if dest.resolve() != campaign.root.resolve():
        shutil.copyfile(campaign.path, dest / CAMPAIGN_FILE)
    out = []
    for name, link in fleet.links.items():
        here = dest / name
        try:
            folder = link.resolve_dir()
            result = pull(Address(link.host.ssh, folder), here, link.session, say=_prefixed(say, name))
            remote_snap = f".campaign/{SNAPSHOT_NAME}"
            link.session.campaign(["ledger-snapshot", folder, f"{folder}/{remote_snap}"], folder, timeout=300)
            link.session.fetch(folder, [remote_snap], here)
            link.session.run(["rm", "-f", f"{folder}/{remote_snap}"], check=False)
            ledger = host_ledger(dest, name)
            ledger.parent.mkdir(parents=True, exist_ok=True)
            (here / remote_snap).replace(ledger)
            try:
                (here / ".campaign").rmdir()  # only the snapshot passed through it
            except OSError:
                pass
            rebase_paths(ledger, folder, str(here.resolve()))
            out.append(HostPull(name, result, ledger))
        except RemoteError as exc:
            why = str(fleet._unreachable(name, str(exc))) if link_failed(exc) else str(exc)
            out.append(HostPull(name, None, None, why))
    return out


def _prefixed(say: Callable[[str], object], name: str) -> Callable[[str], None]:
    """`say`, each line led by the host's name."""

    def out(line: str) -> None:
        say(f"{name}: {line}")

    return out


def pull_lines(pulls: list[HostPull]) -> list[str]:
    lines = []
    for p in pulls:
        if p.result is None:
            lines.append(f"{p.host}: NOT pulled: {p.error}")
            continue
        lines += [f"{p.host}: {line}" for line in report_lines(p.result)]
        lines.append(f"{p.host}: ledger snapshot: {p.ledger}")
    return lines
