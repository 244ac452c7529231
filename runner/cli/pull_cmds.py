"""`campaign pull` (on your own machine) and `campaign retrieval` (on the host, what pull asks).

`pull` imports nothing heavy: it runs on a laptop with neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from runner.campaign.errors import CampaignError


def cmd_pull(ns: argparse.Namespace) -> int:
    from runner.cli import fleet_cmds

    if (several := fleet_cmds.pull_side(ns.source)) is not None:  # a campaign file with [[host]] tables
        return fleet_cmds.cmd_pull(several, ns)
    from runner.remote.pull import pull, report_lines
    from runner.remote.ssh import Address, CopyTool, RemoteError, Session

    try:
        address = Address.parse(ns.source)
    except ValueError as exc:
        raise CampaignError(str(exc)) from None
    options: list[str] = []
    if ns.ssh_config:
        options += ["-F", ns.ssh_config]
    if ns.port:
        options += ["-p", str(ns.port)]
    for opt in ns.ssh_option or []:
        options += ["-o", opt]
    tool = CopyTool(ns.with_tool) if ns.with_tool else None
    try:
        with Session(address.host, options, remote_campaign=ns.remote_campaign) as session:
            result = pull(address, Path(ns.dest) if ns.dest else None, session, tool=tool)
    except RemoteError as exc:
        print(f"campaign pull: {exc}")
        return 1
    for line in report_lines(result):
        print(line)
    return 0 if result.ok else 1


def cmd_retrieval(ns: argparse.Namespace) -> int:
    from runner.campaign.model import load_campaign
    from runner.cli import file_arg

    campaign = load_campaign(file_arg(ns))
    if ns.record_verified:
        return _record(ns, campaign)
    from runner.closing.retrieval import build_list

    listing = build_list(campaign)
    if ns.json:
        print(json.dumps(listing.to_json()))
        return 0
    for e in listing.files:
        print(f"{e.kind.value:<12} {e.bytes:>12}  {e.path}{'  (live)' if e.live else ''}")
    for note in listing.notes:
        print(f"note: {note}")
    print(f"{len(listing.files)} files, {sum(e.bytes for e in listing.files)} bytes under {listing.root}")
    return 0


def _record(ns: argparse.Namespace, campaign: object) -> int:
    from runner.daemon.client import request

    if ns.files is None or ns.bytes is None or not ns.to:
        raise CampaignError("--record-verified needs --files, --bytes and --to")
    result = request(
        campaign, "retrieval_verified", files=ns.files, bytes=ns.bytes, to=ns.to, dest=ns.dest or "", at=time.time()
    )
    print(json.dumps(result) if ns.json else f"recorded: retrieval verified to {ns.to}")
    return 0


def add_arguments(p: dict[str, argparse.ArgumentParser]) -> None:
    pull = p["pull"]
    pull.add_argument(
        "source",
        metavar="[USER@]HOST:DIR",
        help="the campaign folder on the host, as ssh reaches it; or a campaign FILE with [[host]] tables "
        "(every host into DEST/<host>/)",
    )
    pull.add_argument(
        "dest",
        nargs="?",
        metavar="DEST",
        help="where to put the files (default ./<folder name>; with FILE, its folder)",
    )
    pull.add_argument("-F", dest="ssh_config", metavar="SSH_CONFIG", help="an ssh config file (as `ssh -F`)")
    pull.add_argument("-p", "--port", type=int, help="the host's ssh port (as `ssh -p`)")
    pull.add_argument("-o", dest="ssh_option", action="append", metavar="OPTION", help="an ssh option (as `ssh -o`)")
    pull.add_argument(
        "--remote-campaign",
        metavar="CMD",
        help="how to run `campaign` on the host (default: found on PATH, ~/.local/bin or a virtualenv)",
    )
    pull.add_argument("--with", dest="with_tool", choices=("rsync", "sftp"), help="force the copy tool")
    r = p["retrieval"]
    r.add_argument("file", nargs="?", metavar="FILE")
    r.add_argument("--json", action="store_true", help="machine-readable (what `campaign pull` reads)")
    r.add_argument("--record-verified", action="store_true", help="record a verified retrieval (pull does this)")
    r.add_argument("--files", type=int)
    r.add_argument("--bytes", type=int)
    r.add_argument("--to", help="the machine the files went to")
    r.add_argument("--dest", help="the folder they went to there")
