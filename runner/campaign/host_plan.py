"""The plan of a campaign over declared `[[host]]` tables: each host's lane, window and price.

`plan` lays the whole campaign out once (`schedule.build_schedule` puts each variant on its host);
this module says, per host, what runs there, when its window opens and closes, whether its work
and the retrieval of its files fit inside it, and what its bundle costs. The campaign's price is
the sum of the bundles: two hosts are two orders.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from runner.campaign.hosts import host_named, total_price_usd
from runner.campaign.objects import Campaign
from runner.campaign.schedule import Lane, Schedule, build_schedule


def placement(campaign: Campaign) -> dict[str, str]:
    """Which host each variant runs on: its own `host`, else the plan's split (the first host
    for a variant in no phase). Empty for a campaign without [[host]] tables."""
    if not campaign.hosts:
        return {}
    sched = build_schedule(campaign)
    out = {v.name: v.host for v in campaign.variants if v.host is not None}
    for ln in sched.lanes:
        for name in ln.variants:
            out.setdefault(name, ln.host)
    for v in campaign.variants:  # in no phase and on no host: the first host, never two
        out.setdefault(v.name, campaign.hosts[0].name)
    return out


def plan_label(campaign: Campaign) -> str:
    """ "2x3d" for two 3-day hosts, "3d+7d" for mixed ones."""
    days = [h.bundle.days for h in campaign.hosts]
    if len(set(days)) == 1:
        return f"{len(days)}x{days[0]}d"
    return "+".join(f"{d}d" for d in days)


def lane_json(campaign: Campaign, lane: Lane) -> dict[str, Any]:
    h = host_named(campaign, lane.host)
    b = h.bundle
    return {
        "host": h.name,
        "ssh": h.ssh,
        "port": h.port,
        "dir": h.dir,
        "provider": b.provider,
        "gpu": b.gpu,
        "gpus": b.gpus,
        "days": b.days,
        "price_usd": b.price_usd,
        "price_from_catalog": b.price_from_catalog,
        "started_at": _iso(b.started_at),
        "expires_at": _iso(b.expires_at),
        "retrieve_by": _iso(b.retrieve_by),
        "opens_hours": round(lane.opens_hours, 6),
        "closes_hours": round(lane.closes_hours, 6),
        "window_hours": lane.window_hours,
        "end_of_work_hours": round(lane.end_of_work_hours, 6),
        "committed_hours": round(lane.committed_hours, 6),
        "over_hours": round(lane.over_hours, 6),
        "fits": lane.fits,
        "variants": list(lane.variants),
    }


def hosts_json(campaign: Campaign, sched: Schedule) -> dict[str, Any]:
    """The keys `plan --json` adds or overrides for a campaign with [[host]] tables."""
    names = [ln.host for ln in sched.lanes]
    return {
        "plan": plan_label(campaign),
        "bundles": len(sched.lanes),
        "price_usd": total_price_usd(campaign),
        "price_from_catalog": all(h.bundle.price_from_catalog for h in campaign.hosts),
        "hosts": [lane_json(campaign, ln) for ln in sched.lanes],
        "host_of": {i.name: names[i.host] for i in sched.variant_items() if i.host is not None},
    }


def render_lanes(campaign: Campaign, sched: Schedule, console) -> None:
    """One line per host: its bundle, window, price, lane and whether the lane fits."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from runner.campaign.budget import format_usd
    from runner.campaign.plan import fmt_hours

    table = Table(title="hosts", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("host", no_wrap=True)
    table.add_column("bundle", no_wrap=True)
    table.add_column("window UTC", no_wrap=True)
    table.add_column("price", justify="right", no_wrap=True)
    table.add_column("lane", overflow="fold", ratio=1)
    table.add_column("committed", justify="right", no_wrap=True)
    for ln in sched.lanes:
        h = host_named(campaign, ln.host)
        b = h.bundle
        fit = "fits" if ln.fits else f"{fmt_hours(ln.over_hours)} h OVER"
        table.add_row(
            escape(h.name),
            escape(f"{b.gpu} x{b.gpus}, {b.days}d"),
            f"{b.started_at:%m-%d %H:%M} -> {b.expires_at:%m-%d %H:%M}",
            format_usd(b.price_usd),
            escape(", ".join(ln.variants) or "(no variant)"),
            f"{fmt_hours(ln.committed_hours)}/{fmt_hours(ln.window_hours)} h, {fit}",
            style=None if ln.fits else "bold red",
        )
    console.print(table)
    console.print(
        f"{len(sched.lanes)} bundles ({plan_label(campaign)}): {format_usd(total_price_usd(campaign))} in all",
        highlight=False,
    )


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")
