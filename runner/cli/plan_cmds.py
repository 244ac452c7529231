"""`campaign init`, `campaign check` and `campaign plan`: before and during the rental, on paper.

None of these touches the runner: they read (or, for init, write) the campaign file only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from importlib import resources
from pathlib import Path

from runner.campaign.errors import CampaignError
from runner.campaign.host_plan import placement
from runner.campaign.json_numbers import json_ready
from runner.campaign.model import CAMPAIGN_FILE, load_campaign, parse_campaign
from runner.campaign.objects import CATEGORIES, Campaign
from runner.campaign.plan import deadline_note, fmt_hours, plan_campaign, render_plan, summary_line
from runner.campaign.toml_lines import KeyLines
from runner.supervision.regex_check import earlier_output_warning, regex_findings

TEMPLATE_STARTED_AT = "started_at = 2026-11-29T09:00:00Z"


def template_text(name: str | None = None, now: dt.datetime | None = None) -> str:
    """The commented template, its window starting at the current whole hour (UTC) and, when given,
    named after the campaign folder. Rounded down, not up: a start left unedited then puts expiry
    and the retrieval deadline early, never late."""
    text = resources.files("runner.campaign").joinpath("template.toml").read_text(encoding="utf-8")
    now = now or dt.datetime.now(dt.UTC)
    start = now.replace(minute=0, second=0, microsecond=0)
    text = text.replace(TEMPLATE_STARTED_AT, f"started_at = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}", 1)
    if name:
        text = re.sub(r'(?m)^name = "my-campaign"', f"name = {json.dumps(name)}", text, count=1)
    return text


def cmd_init(ns: argparse.Namespace) -> int:
    folder = Path(ns.dir)
    target = folder / CAMPAIGN_FILE
    if folder.exists() and not folder.is_dir():
        raise CampaignError("exists and is not a folder", file=folder)
    if target.exists() and not getattr(ns, "force", False):
        raise CampaignError("already exists: edit it, or pass --force to overwrite it", file=target)
    name = folder.resolve().name or None
    text = template_text(name)
    parse_campaign(text, target.absolute())  # the template must always load cleanly
    folder.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{CAMPAIGN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    print(f"wrote {target}")
    print(f"next: edit it, then `campaign check {ns.dir}` and `campaign plan {ns.dir}`")
    return 0


def check_summary(c: Campaign) -> list[str]:
    """What `check` found, in a few lines."""
    b = c.bundle
    counts = ", ".join(f"{n} {cat}" for cat in CATEGORIES if (n := sum(v.category == cat for v in c.variants)))
    price = f"{b.price_usd:.2f} USD ({'catalog' if b.price_from_catalog else 'price_usd'})"
    lines = [
        f"ok: {c.path}",
        f"campaign  {c.name}: {c.question}",
        f"bundle    {b.provider} {b.gpu} ({b.gpus} GPU{'s' if b.gpus > 1 else ''}), {b.days} days, {price}",
        f"window    {b.started_at:%Y-%m-%d %H:%M} -> {b.expires_at:%Y-%m-%d %H:%M} UTC, "
        f"files off by {b.retrieve_by:%Y-%m-%d %H:%M}",
        f"variants  {len(c.variants)} ({counts}): {', '.join(v.name for v in c.variants)}",
        f"phases    {len(c.phases)}: {', '.join(p.name for p in c.phases)}",
        f"rules     {len(c.rules)}"
        + (
            ": " + "; ".join(r.describe() for r in c.rules)
            if c.rules
            else " (no stop rule: nothing will stop a run early)"
        ),
    ]
    if c.hosts:
        where = placement(c)
        for h in c.hosts:
            hb = h.bundle
            mine = ", ".join(n for n, host in where.items() if host == h.name) or "no variant"
            lines.append(
                f"host      {h.name}: {h.ssh}{':' + str(h.port) if h.port else ''} {h.dir}; {hb.gpu} x{hb.gpus}, "
                f"{hb.days} days from {hb.started_at:%Y-%m-%d %H:%M}, {hb.price_usd:.2f} USD; runs {mine}"
            )
    if c.decision:
        d = c.decision
        lines.append(
            f"decision  {d.metric} {'higher' if d.higher_is_better else 'lower'} is better, "
            f"min gain {d.min_gain:g} over {d.control}"
        )
    else:
        lines.append("decision  none: the report will draw no conclusion")
    if c.spend:
        lines.append(
            f"spending  {len(c.spend)} line(s), {sum(s.usd for s in c.spend):.2f} USD (kept apart from the rental)"
        )
    return lines


def cmd_check(ns: argparse.Namespace) -> int:
    campaign = load_campaign(ns.file)
    for line in check_summary(campaign):
        print(line)
    report = plan_campaign(campaign)
    print(f"plan      {summary_line(report)}")
    if late := deadline_note(report):
        print(f"note      {late}")
    if report.unscheduled:
        print(f"note      declared but in no phase: {', '.join(report.unscheduled)}")
    for v in campaign.variants:
        if v.adapter and not v.base_revision:
            print(f"note      {v.name} is an adapter without base_revision: verify will not approve it")
        if v.metrics_regex and "step" not in re.compile(v.metrics_regex).groupindex:
            stepped = [r.kind for r in campaign.rules_for(v.name) if r.kind in ("below", "above")]
            if stepped:
                print(
                    f"note      {v.name}'s metrics_regex has no (?P<step>...) group: its "
                    f"{', '.join(stepped)} rule(s) wait for a step that never comes"
                )
    for line in metrics_warnings(campaign):
        print(line)
    if report.needs_options:
        print("note      see `campaign plan` for the options")
    return 0


def metrics_warnings(campaign: Campaign) -> list[str]:
    """A metrics_regex that can give no numbers, named by file, line and field; and an earlier
    run's output that the variant's regex or format matches without numbers."""
    try:
        lines: KeyLines | None = KeyLines(Path(campaign.path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        lines = None
    out = []
    for i, v in enumerate(campaign.variants):
        if v.metrics_regex:
            line = lines.line("variant", i, "metrics_regex") if lines is not None else None
            where = f"{campaign.path}" + (f":{line}" if line else "")
            for f in regex_findings(v.metrics_regex):
                out.append(f"warning   {where}: field 'variant[{i}].{f.field}' ({v.name}): {f.text}")
        earlier = earlier_output_warning(campaign.root, v.name, v.metrics_regex, v.metrics_format)
        if earlier is not None:
            path, text = earlier
            out.append(f"warning   {v.name}: in {os.path.relpath(path, campaign.root)}, {text}")
    return out


def cmd_plan(ns: argparse.Namespace) -> int:
    campaign = load_campaign(ns.file)
    report = plan_campaign(campaign)
    if getattr(ns, "json", False):
        json.dump(json_ready(report.to_json()), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    render_plan(report, Console(highlight=False))
    return 0


__all__ = ["cmd_init", "cmd_check", "cmd_plan", "template_text", "check_summary", "fmt_hours"]
