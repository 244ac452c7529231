"""`up`, `down`, `status`, `start`, `abort` and `resume` from the user's side of a campaign over
several hosts: the campaign file declares [[host]] tables and this folder is none of them.

Each command goes to every host (up, down, status) or to the run's host (start, abort, resume)
through `runner.daemon.fleet`. A host that cannot be reached is said so, with since when; a
request routed to it is refused with that reason (exit 1), never queued.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from runner.campaign.durations import format_span
from runner.campaign.errors import CampaignError
from runner.campaign.host_view import recorded_host
from runner.campaign.model import load_campaign
from runner.campaign.objects import Campaign
from runner.cli import file_arg
from runner.ledger.states import RunState

if TYPE_CHECKING:
    from runner.daemon.fleet import Fleet, HostResult


def _fleet(campaign: Campaign) -> Fleet:
    """Every host's runner over SSH. Imported here, not at the top: every one-host command imports
    this module for `user_side`, and the SSH side costs a tenth of a second to import."""
    from runner.daemon.fleet import Fleet

    return Fleet(campaign)


def user_side(ns: argparse.Namespace) -> Campaign | None:
    """The campaign when this folder drives several hosts (None: a host's folder, or one host)."""
    if getattr(ns, "host", None):
        return None  # `up --host NAME`: this folder is that host
    try:
        campaign = load_campaign(file_arg(ns))
    except CampaignError:
        return None  # the one-host commands say what is wrong with the file
    return campaign if campaign.hosts and recorded_host(campaign) is None else None


def cmd_up(campaign: Campaign, ns: argparse.Namespace) -> int:
    with _fleet(campaign) as fleet:
        said = fleet.up()
    return _per_host(said)


def cmd_down(campaign: Campaign, ns: argparse.Namespace) -> int:
    with _fleet(campaign) as fleet:
        said = fleet.down(abort_runs=bool(getattr(ns, "abort_runs", False)))
    return _per_host(said)


def _per_host(said: dict[str, HostResult]) -> int:
    for name, res in said.items():
        for line in res.text.splitlines() or [""]:
            print(f"{name}: {line}")
    return 0 if all(r.ok for r in said.values()) else 1


def cmd_status(campaign: Campaign, ns: argparse.Namespace) -> int:
    with _fleet(campaign) as fleet:
        snap = fleet.status()
    if getattr(ns, "json", False):  # the hosts' "nan" strings (socket form) as null + `<key>_nonfinite`
        from runner.daemon.status_json import status_ready

        print(json.dumps(status_ready(snap), indent=1, allow_nan=False))
    else:
        print(render_fleet(snap))
    return 0


def cmd_start(campaign: Campaign, ns: argparse.Namespace) -> int:
    from runner.daemon.fleet import HostUnreachable

    with _fleet(campaign) as fleet:
        try:
            host, out = fleet.start(ns.variant)
        except HostUnreachable as exc:
            print(f"campaign: {exc}", file=sys.stderr)
            return 1
    if out.get("state") == RunState.REFUSED:
        print(f"campaign: {host}/{out['run']} refused: {out.get('reason')}", file=sys.stderr)
        return 1
    note = f" ({out['note']})" if out.get("note") else ""
    print(f"{host}/{out['run']}: {out['state']}{note}")
    return 0


def cmd_run_op(campaign: Campaign, ns: argparse.Namespace, op: str, **args) -> int:
    """`abort` or `resume` of HOST/RUN (or a RUN id that one host holds)."""
    from runner.daemon.fleet import HostUnreachable

    with _fleet(campaign) as fleet:
        try:
            host, rid = fleet.route(ns.run)
            out = fleet.request(host, op, run=rid, **args)
        except HostUnreachable as exc:
            print(f"campaign: {op} {ns.run} refused: {exc}", file=sys.stderr)
            return 1
    note = f" ({out['note']})" if out.get("note") else ""
    print(f"{host}/{out['run']}: {out['state']}{note}")
    return 0


def render_fleet(snap: dict) -> str:
    """The merged snapshot for a person: one line per host, then one per run with its host."""
    from runner.daemon.fleet import fmt_since

    lines = [f"{snap['campaign']['name']}: {len(snap['hosts'])} hosts"]
    for h in snap["hosts"]:
        if not h["reachable"]:
            lines.append(f"{h['host']:<10} UNREACHABLE since {fmt_since(h['unreachable_since'], snap['now'])}")
            continue
        b = h.get("bundle") or {}
        if h.get("runner") is None:
            lines.append(f"{h['host']:<10} {h.get('error') or 'the runner is not running'}")
            continue
        slots = h.get("slots") or {}
        lines.append(
            f"{h['host']:<10} {b.get('gpu')} {b.get('plan')}, slots {slots.get('busy')}/{slots.get('total')}, "
            f"expires {b.get('expires_at')} (in {format_span(b.get('remaining_seconds') or 0)}) [{b.get('warning')}]"
        )
    runs = snap.get("runs") or []
    if runs:
        lines.append(f"{'HOST':<10} {'RUN':<24} {'STATE':<9} {'STEP':>8}  REASON")
        for r in runs:
            step = "-" if r.get("step") is None else str(r["step"])
            lines.append(f"{r['host']:<10} {r['id']:<24} {r['state']:<9} {step:>8}  {r.get('stop_reason') or ''}")
    else:
        lines.append("no runs yet")
    return "\n".join(lines)


def cmd_ledger_snapshot(ns: argparse.Namespace) -> int:
    """A consistent copy of this folder's ledger (`VACUUM INTO`), never the live file."""
    from pathlib import Path

    from runner.campaign.statedir import paths_for
    from runner.ledger.snapshot import snapshot

    campaign = load_campaign(file_arg(ns))
    ledger = paths_for(campaign).ledger
    if not ledger.exists():
        raise CampaignError("no ledger yet: the runner never started here", file=ledger)
    print(snapshot(ledger, Path(ns.out)))
    return 0


def pull_side(source: str) -> Campaign | None:
    """`campaign pull FILE [DEST]` where FILE declares [[host]] tables (not `HOST:DIR`)."""
    from pathlib import Path

    from runner.campaign.model import resolve_campaign_path

    if ":" in source and not Path(source).exists():
        return None
    path = resolve_campaign_path(source)
    if not path.is_file():
        return None
    campaign = load_campaign(path)
    return campaign if campaign.hosts else None


def cmd_pull(campaign: Campaign, ns: argparse.Namespace) -> int:
    from pathlib import Path

    from runner.daemon.fleet_pull import pull_hosts, pull_lines

    dest = Path(ns.dest) if ns.dest else campaign.root
    with _fleet(campaign) as fleet:
        pulls = pull_hosts(fleet, dest)
    for line in pull_lines(pulls):
        print(line)
    print(f"next: `campaign report {dest}` reports across the hosts")
    return 0 if all(p.ok for p in pulls) else 1


def cmd_report(campaign: Campaign, ns: argparse.Namespace) -> int:
    """The report across the pulled hosts; like the single-host one it also leaves REPORT.md in the
    output folder (here DEST's, DEST being where `campaign pull FILE DEST` put the hosts)."""
    from campaign_train.atomic import write_text_atomic
    from runner.campaign.json_numbers import json_ready
    from runner.closing.hosts_report import build_hosts_report

    report = build_hosts_report(campaign)
    markdown = report.to_markdown()
    campaign.output_path.mkdir(parents=True, exist_ok=True)
    write_text_atomic(campaign.output_path / "REPORT.md", markdown)
    if getattr(ns, "json", False):
        print(json.dumps(json_ready(report.to_json()), indent=2, allow_nan=False))
    elif getattr(ns, "markdown", False):
        print(markdown)
    else:
        sys.stdout.write(report.to_text())
    return 0
