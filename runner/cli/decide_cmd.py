"""`campaign decide [FILE] continue | cut VARIANT... | revisit [--note TEXT]`: the pilot decision
from the shell, for someone with thirty seconds of SSH on a phone.

It sends the same `decide` request as the console's dialog (the runner records who, how and when,
takes the dropped variants out of the queue and lets the held launches go); only the `how` differs:
"shell". Exit 0 once recorded, 2 on bad input, 1 when the runner cannot be reached.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys

from runner.campaign.durations import format_span
from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign
from runner.campaign.objects import Campaign
from runner.campaign.statedir import paths_for
from runner.cli.daemon_cmds import _ensure, _who
from runner.closing.pilot import CHOICES
from runner.daemon import client, control
from runner.ledger import queries
from runner.ledger import store as L

USAGE = "expected [FILE] continue | cut VARIANT... | revisit"


def split_decide_args(args: list[str]) -> tuple[str | None, str, list[str]]:
    """(FILE or None, choice, variants) from `[FILE] CHOICE [VARIANT...]`."""
    if args and args[0].lower() in CHOICES:
        file, choice, rest = None, args[0].lower(), args[1:]
    elif len(args) >= 2 and args[1].lower() in CHOICES:
        file, choice, rest = args[0], args[1].lower(), args[2:]
    else:
        raise CampaignError(f"{USAGE}, got {' '.join(args) or 'nothing'}")
    if choice == "cut" and not rest:
        raise CampaignError("a cut keeps at least one variant: `campaign decide cut VARIANT...` names the ones to keep")
    if choice != "cut" and rest:
        raise CampaignError(f"`{choice}` takes no variant names (got {' '.join(rest)}); only `cut` does")
    return file, choice, rest


def _has_launched(campaign: Campaign) -> bool:
    path = paths_for(campaign).ledger
    if not path.exists():
        return False
    conn = L.connect(path, readonly=True)
    try:
        return queries.any_launched(conn)
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def cmd_decide(ns: argparse.Namespace) -> int:
    file, choice, kept = split_decide_args(list(ns.args))
    campaign = load_campaign(file)
    declared = [v.name for v in campaign.variants]
    unknown = [n for n in kept if n not in declared]
    if unknown:
        raise CampaignError(
            f"not declared in the campaign file: {', '.join(unknown)} (declared: {', '.join(declared)})",
            file=campaign.path,
            field="variants",
        )
    if not control.is_running(campaign):
        if not _has_launched(campaign):
            raise CampaignError("nothing has run yet: there is no pilot to decide on", file=campaign.path)
        _ensure(campaign)
    try:
        out = client.request(
            campaign, "decide", choice=choice, variants=kept, note=ns.note, who=f"{_who()} (shell)", how="shell"
        )
    except client.RequestFailed as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 1
    print(render_decision(out))
    return 0


def render_decision(out: dict) -> str:
    """The recorded decision in a few plain lines."""
    choice = out.get("choice")
    what = f"cut to {', '.join(out.get('variants') or [])}" if choice == "cut" else str(choice)
    lines = [f"decision {out.get('seq')} recorded: {what} (by {out.get('who')})"]
    if out.get("dropped"):
        lines.append(f"dropped from the queue: {', '.join(out['dropped'])}")
    elif choice == "cut":
        lines.append("dropped from the queue: nothing (every variant not kept had already run)")
    if out.get("already_ran"):
        lines.append(f"not kept but already run, left as they are: {', '.join(out['already_ran'])}")
    if out.get("note"):
        lines.append(f"note: {out['note']}")
    est = out.get("estimate") or {}
    if est.get("remaining_hours") is not None:
        left = format_span(float(est["remaining_hours"]) * 3600.0)
        fit = (
            f"fits, {format_span(float(est.get('spare_hours') or 0) * 3600.0)} spare"
            if est.get("fits")
            else f"does NOT fit: {format_span(float(est.get('over_hours') or 0) * 3600.0)} past the retrieval deadline"
        )
        lines.append(f"re-estimate: {left} of work left, {fit}")
    lines.append("launches go on" if choice != "revisit" else "launches go on; the question is marked for revisiting")
    return "\n".join(lines)
