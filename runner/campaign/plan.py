"""The schedule against the rental window, and what else could be bought or given up.

When the schedule does not fit, or fits with less than `TIGHT_FRACTION` of the window to spare,
the options are: the next longer plan(s) of the same offer at their catalog price; two bundles of
the current plan at the summed price, with the variants split across the two hosts; a reduced
protocol that drops exploratory, then useful variants. Prices come only from the catalog or the
user's own `price_usd`: a plan without one says so, and no hourly rate is ever derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.campaign.catalog import load_catalog
from runner.campaign.clock import ClockReading, read_clock
from runner.campaign.host_plan import hosts_json, render_lanes
from runner.campaign.objects import CATEGORIES, Campaign
from runner.campaign.schedule import Schedule, build_schedule

TIGHT_FRACTION = 0.10  # under this share of the window to spare, the options are shown too
TWO_HOSTS_CAVEAT = "two bundles never shorten one run nor pool memory"


@dataclass(frozen=True)
class Option:
    plan: str  # "7d", "2x3d", "reduced"
    price_usd: float | None  # None: no published price (never an invented one)
    fits: bool
    note: str
    committed_hours: float
    window_hours: float
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "plan": self.plan,
            "price_usd": self.price_usd,
            "fits": self.fits,
            "note": self.note,
            "committed_hours": round(self.committed_hours, 6),
            "window_hours": self.window_hours,
            "over_hours": round(max(0.0, self.committed_hours - self.window_hours), 6),
            **self.extra,
        }


@dataclass(frozen=True)
class PlanReport:
    campaign: Campaign
    schedule: Schedule
    options: tuple[Option, ...]
    unscheduled: tuple[str, ...]  # declared variants that no phase runs
    clock: ClockReading  # where the window stands at the time of planning

    @property
    def tight(self) -> bool:
        return self.schedule.fits and self.schedule.slack_fraction < TIGHT_FRACTION

    @property
    def needs_options(self) -> bool:
        return not self.schedule.fits or self.tight

    def to_json(self) -> dict:
        s, b = self.schedule, self.campaign.bundle
        out: dict[str, Any] = {
            "window_hours": s.window_hours,
            "committed_hours": round(s.committed_hours, 6),
            "uncommitted_hours": round(s.uncommitted_hours, 6),
            "over_hours": round(s.over_hours, 6),
            "fits": s.fits,
            "items": [i.to_json() for i in s.items],
            "options": [o.to_json() for o in self.options],
            "tight": self.tight,
            "retrieval_hours": s.retrieval_hours,
            "before_window_hours": s.before_window_hours,
            "plan": b.plan_label,
            "provider": b.provider,
            "gpu": b.gpu,
            "gpus": b.gpus,
            "price_usd": b.price_usd,
            "price_from_catalog": b.price_from_catalog,
            "started_at": _iso(b.started_at),
            "expires_at": _iso(b.expires_at),
            "retrieve_by": _iso(b.retrieve_by),
            "unscheduled_variants": list(self.unscheduled),
            "clock": {
                "level": self.clock.level,
                "now_hours": self.now_hours,
                "remaining_seconds": self.clock.remaining_seconds,
            },
        }
        if s.lanes:  # declared hosts: each lane, the summed price, items named by host
            out.update(hosts_json(self.campaign, s))
            for item in out["items"]:
                if item.get("host") is not None:
                    item["host"] = s.lanes[item["host"]].host
        return out

    @property
    def now_hours(self) -> float:
        """Hours since the window opened at the time of planning (negative before it opens)."""
        return self.campaign.bundle.window_hours - (self.clock.remaining_seconds + self.clock.opens_in_seconds) / 3600


def plan_campaign(campaign: Campaign, now: float | None = None) -> PlanReport:
    """The schedule of the whole campaign and, when it is over or tight, the options.
    `now` (epoch seconds, default the current time) only places the reader in the window."""
    sched = build_schedule(campaign)
    in_phases = {n for p in campaign.phases for n in p.variants}
    unscheduled = tuple(v.name for v in campaign.variants if v.name not in in_phases)
    clock = read_clock(campaign.bundle, now)
    report = PlanReport(campaign, sched, (), unscheduled, clock)
    if not report.needs_options:
        return report
    # with declared hosts the bundles are bought: only giving variants up is left to offer
    options = [] if campaign.hosts else [*longer_plans(campaign, sched), two_bundles(campaign, sched)]
    reduced = reduced_protocol(campaign, sched)
    if reduced is not None:
        options.append(reduced)
    return PlanReport(campaign, sched, tuple(options), unscheduled, clock)


def longer_plans(campaign: Campaign, sched: Schedule) -> list[Option]:
    """The same offer for longer, shortest first, up to the first one that fits."""
    b = campaign.bundle
    offer = load_catalog(b.catalog).find(b.provider, b.gpu)
    out: list[Option] = []
    if offer is None:  # not in the catalog: no longer plan to offer
        return out
    for days in sorted(d for d in offer.days if d > b.days):
        price = offer.price(days)
        window = days * 24.0
        fits = sched.fits_in(window)
        spare = window - sched.committed_hours
        when = f"{fmt_hours(spare)} h to spare" if fits else f"still {fmt_hours(-spare)} h over"
        if price is None:
            note = f"{b.provider} publishes no price for {b.gpu} {days} days: ask for a quote; same schedule, {when}"
        else:
            note = f"{b.provider} {b.gpu} {days} days at the catalog price; same schedule, {when}"
        out.append(Option(f"{days}d", price, fits, note, sched.committed_hours, window, {"days": days, "bundles": 1}))
        if fits:
            break
    return out


def two_bundles(campaign: Campaign, sched: Schedule) -> Option:
    """Two bundles of the current plan: independent variants split across two hosts."""
    b = campaign.bundle
    split = build_schedule(campaign, hosts=2)
    price = round(2 * b.price_usd, 2)
    source = "catalog price" if b.price_from_catalog else "price you gave"
    saved = sched.committed_hours - split.committed_hours
    if saved > 1e-9:
        gain = f"variants split across two hosts: {fmt_hours(sched.committed_hours)} h -> {fmt_hours(split.committed_hours)} h"
    else:
        gain = "nothing to split across two hosts: the schedule stays as long"
    fit = "fits" if split.fits else f"still {fmt_hours(split.over_hours)} h over"
    note = f"2 x {b.days}d at the {source}; {gain}, {fit}; {TWO_HOSTS_CAVEAT}; to run it, declare two [[host]] tables"
    return Option(
        f"2x{b.days}d",
        price,
        split.fits,
        note,
        split.committed_hours,
        split.window_hours,
        {"days": b.days, "bundles": 2, "saves_hours": round(max(0.0, saved), 6)},
    )


def reduced_protocol(campaign: Campaign, sched: Schedule) -> Option | None:
    """Drop exploratory variants, then useful ones, until the schedule fits; None if there is
    nothing to drop. Essential variants are never dropped."""
    b = campaign.bundle
    scheduled = [v for v in campaign.variants if v.name in sched.variants]  # in the file's order
    best = None
    for level in ("exploratory", "useful"):
        cut = CATEGORIES[CATEGORIES.index(level) :]
        dropped = [v for v in scheduled if v.category in cut]
        if not dropped or (best is not None and len(dropped) == len(best[1])):
            continue
        kept = [v.name for v in scheduled if v.category not in cut]
        reduced = build_schedule(campaign, variants=kept)
        best = (reduced, dropped)
        if reduced.fits:
            break
    if best is None:
        return None
    reduced, dropped = best
    frees = sched.committed_hours - reduced.committed_hours
    given_up = ", ".join(f"{v.name} ({v.category})" for v in dropped)
    fit = "fits" if reduced.fits else f"still {fmt_hours(reduced.over_hours)} h over"
    note = f"drops {given_up}: frees {fmt_hours(frees)} h, {fit} in the {b.days}d plan"
    d = campaign.decision
    if d is not None and d.control in {v.name for v in dropped}:
        note += f"; the decision's control {d.control!r} is dropped with them"
    gives_up = [f"the result of {v.name} ({v.category})" for v in dropped]
    return Option(
        "reduced",
        b.price_usd,
        reduced.fits,
        note,
        reduced.committed_hours,
        reduced.window_hours,
        {
            "days": b.days,
            "bundles": 1,
            "frees_hours": round(frees, 6),
            "dropped": [v.name for v in dropped],
            "gives_up": gives_up,
        },
    )


def _iso(t) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Text


def fmt_hours(hours: float) -> str:
    """Hours to one decimal, without a trailing ".0": 48, 10.5, -4."""
    text = f"{hours:.1f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def summary_line(report: PlanReport) -> str:
    """One sentence: committed against the window, and whether it fits."""
    s = report.schedule
    if s.lanes:
        over = [ln for ln in s.lanes if not ln.fits]
        if over:
            worst = max(over, key=lambda ln: ln.over_hours)
            return (
                f"{len(over)} of {len(s.lanes)} hosts over their window: {worst.host} "
                f"{fmt_hours(worst.committed_hours)} h committed of {fmt_hours(worst.window_hours)} h, "
                f"{fmt_hours(worst.over_hours)} h OVER."
            )
        pct = round(100 * s.slack_fraction)
        tight = ", tight" if report.tight else ""
        return (
            f"every host's lane fits its window (incl. retrieval); the tightest has "
            f"{fmt_hours(s.uncommitted_hours)} h uncommitted ({pct}%{tight})."
        )
    head = (
        f"{fmt_hours(s.committed_hours)} h committed of {fmt_hours(s.window_hours)} h "
        f"(incl. {fmt_hours(s.retrieval_hours)} h retrieval)"
    )
    if not s.fits:
        return f"{head}: {fmt_hours(s.over_hours)} h OVER the window."
    pct = round(100 * s.slack_fraction)
    tight = ", tight" if report.tight else ""
    return f"{head}: fits, {fmt_hours(s.uncommitted_hours)} h uncommitted ({pct}%{tight})."


def deadline_note(report: PlanReport) -> str | None:
    """Said when the retrieval deadline has passed: the plan is the window's, and nothing of it can
    still run in this window (the runner refuses every launch), however well it fits."""
    if report.schedule.lanes or report.clock.to_retrieve_seconds >= 0:
        return None
    return (
        "the retrieval deadline has passed: nothing more runs in this window (the plan is "
        "the window's, from its start); running this plan needs a new bundle"
    )


def where_now(report: PlanReport) -> str:
    """Where the reader stands in the window, and what the plan has running at that hour."""
    now, s = report.now_hours, report.schedule
    if now < 0:
        return f"the window opens in {fmt_hours(-now)} h"
    if now >= s.window_hours:
        return f"the window closed {fmt_hours(now - s.window_hours)} h ago"
    planned = [i.name for i in s.items if i.kind == "phase" and i.start_hours <= now < i.end_hours]
    doing = f"; the plan has {', '.join(planned)} now" if planned else ""
    return f"now: hour {fmt_hours(now)} of {fmt_hours(s.window_hours)} ({report.clock.level}){doing}"


def render_plan(report: PlanReport, console) -> None:
    """Print the plan on a Rich console: bundle, schedule table, summary, options."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from runner.campaign.budget import format_usd

    c, s = report.campaign, report.schedule
    b = c.bundle
    price = f"{format_usd(b.price_usd)} ({'catalog' if b.price_from_catalog else 'your price_usd'})"
    if s.lanes:
        console.print(f"[bold]{escape(c.name)}[/]: {len(s.lanes)} hosts, hour 0 = {_short(b.started_at)} UTC")
        render_lanes(c, s, console)
    else:
        console.print(
            f"[bold]{escape(c.name)}[/]: {escape(b.provider)} {escape(b.gpu)} "
            f"({b.gpus} GPU{'s' if b.gpus > 1 else ''}), {b.days} days, {price}",
            highlight=False,
        )
        console.print(
            f"window {_short(b.started_at)} -> {_short(b.expires_at)} UTC, "
            f"files off by {b.retrieve_by.strftime('%m-%d %H:%M')}",
            highlight=False,
        )

    console.print(where_now(report), highlight=False)

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    table.add_column("phase / variant", overflow="fold", ratio=1, min_width=14)
    table.add_column("uses")
    table.add_column("GPU", justify="right")
    table.add_column("start", justify="right")
    table.add_column("end", justify="right")
    table.add_column("hours", justify="right")
    table.add_column("starts UTC", no_wrap=True)
    for it in s.items:
        if it.kind == "phase":
            name = it.name + (" (before window)" if it.before_window else "")
            gpu = "all" if it.uses == "gpu" and not any(v.phase == it.name for v in s.variant_items()) else ""
            style = "dim" if it.before_window else None
        else:
            name = f"  {it.name} ({it.category})"
            gpu = ",".join(map(str, it.gpus)) or "-"
            if s.lanes and it.host is not None:
                gpu = f"{s.lanes[it.host].host}:{gpu}"
            elif s.hosts > 1 and it.gpus:
                gpu = f"h{it.host}:{gpu}"
            style = None
        when = b.started_at.timestamp() + it.start_hours * 3600
        table.add_row(
            escape(name),
            it.uses,
            gpu,
            fmt_hours(it.start_hours),
            fmt_hours(it.end_hours),
            fmt_hours(it.hours),
            _short_ts(when),
            style=style,
        )
    end = s.end_of_work_hours
    table.add_row(
        "retrieve files",
        "host",
        "",
        fmt_hours(end),
        fmt_hours(s.committed_hours),
        fmt_hours(s.retrieval_hours),
        _short_ts(b.started_at.timestamp() + end * 3600),
    )
    console.print(table)

    style = "bold red" if not s.fits else ("yellow" if report.tight else "green")
    console.print(summary_line(report), style=style, highlight=False)
    if s.before_window_hours:
        console.print(
            f"human preparation before the window: {fmt_hours(s.before_window_hours)} h (not counted against it)",
            highlight=False,
        )
    if report.unscheduled:
        console.print(
            f"declared but in no phase (not scheduled): {escape(', '.join(report.unscheduled))}", highlight=False
        )
    late = deadline_note(report)
    if late:
        console.print(late, style="bold red", highlight=False)
    if not report.options:
        if not late:
            console.print("no other plan needed.", highlight=False)
        return
    opts = Table(title="options", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    opts.add_column("plan", no_wrap=True)
    opts.add_column("price", justify="right", no_wrap=True)
    opts.add_column("fits", no_wrap=True)
    opts.add_column("note", overflow="fold", ratio=1)
    for o in report.options:
        opts.add_row(
            escape(o.plan),
            format_usd(o.price_usd) if o.price_usd is not None else "no price",
            "yes" if o.fits else "no",
            escape(o.note),
        )
    console.print(opts)


def plan_text(report: PlanReport, width: int = 80) -> str:
    """The rendered plan as plain text at `width` columns (for tests and files)."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    render_plan(report, Console(file=buf, width=width, color_system=None, force_terminal=False))
    return buf.getvalue()


def _short(t) -> str:
    return t.strftime("%Y-%m-%d %H:%M")


def _short_ts(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%a %d %H:%M")
