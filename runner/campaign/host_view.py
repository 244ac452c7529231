"""Which declared host this campaign folder is, and what its runner may run.

A campaign with `[[host]]` tables has one runner per host, each in that host's copy of the
folder. `campaign up --host NAME` (what the user's side runs over SSH) records the name in
`.campaign/host`; the runner then loads the file as that host sees it (`hosts.on_host`: its own
bundle and window) and refuses a variant placed on another host, so a run never starts twice.
"""

from __future__ import annotations

from pathlib import Path

from runner.campaign.errors import CampaignError
from runner.campaign.hosts import on_host
from runner.campaign.model import load_campaign
from runner.campaign.objects import Campaign
from runner.campaign.statedir import paths_for

HOST_FILE = "host"  # in .campaign/: the name of the declared host this folder is


def host_file(campaign_or_root: object) -> Path:
    return paths_for(campaign_or_root).dir / HOST_FILE


def recorded_host(campaign_or_root: object) -> str | None:
    try:
        return host_file(campaign_or_root).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def record_host(campaign: Campaign, name: str) -> None:
    """Remember that this folder is host `name` (refused when the file declares no such host,
    or when the folder already is another host: one folder, one host)."""
    declared = [h.name for h in campaign.hosts]
    if name not in declared:
        what = f"declares hosts {', '.join(declared)}" if declared else "declares no [[host]] table"
        raise CampaignError(f"--host {name}: the campaign file {what}", file=campaign.path)
    old = recorded_host(campaign)
    if old is not None and old != name:
        raise CampaignError(
            f"--host {name}: this folder is already host {old!r} (see {host_file(campaign)}); "
            "one folder holds one host's runs",
            file=campaign.path,
        )
    paths = paths_for(campaign)
    paths.ensure()
    tmp = host_file(campaign).with_suffix(".tmp")
    tmp.write_text(name + "\n", encoding="utf-8")
    tmp.replace(host_file(campaign))


def as_host(campaign: Campaign, name: str | None = None) -> Campaign:
    """The campaign as this folder's host sees it; unchanged without [[host]] tables."""
    if not campaign.hosts:
        return campaign
    name = name or recorded_host(campaign)
    if name is None:
        declared = ", ".join(h.name for h in campaign.hosts)
        raise CampaignError(
            f"declares hosts ({declared}) but this folder is none of them yet: start its runner "
            "with `campaign up --host NAME` (the user's side does so over SSH)",
            file=campaign.path,
        )
    if name not in {h.name for h in campaign.hosts}:
        raise CampaignError(
            f"this folder is host {name!r}, which the campaign file no longer declares", file=campaign.path
        )
    return on_host(campaign, name)


def load_as_host(file: str | Path | None) -> Campaign:
    """What a runner loads: the campaign file, as this folder's host sees it."""
    return as_host(load_campaign(file))


def not_placed_here(campaign: Campaign, variant: str) -> str | None:
    """Why this host's runner must not run `variant` (placed on another host), or None."""
    if campaign.this_host is None:
        return None
    from runner.campaign.host_plan import placement  # the schedule: only for a [[host]] campaign

    where = placement(campaign).get(variant)
    if where is None or where == campaign.this_host:
        return None
    return (
        f"variant {variant!r} is placed on host {where!r}, not on this host ({campaign.this_host!r}): "
        f"start it there (from the user's side, `campaign start {variant}` routes it)"
    )
