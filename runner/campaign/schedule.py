"""The campaign's phases laid out in time, in hours from the rental window's start.

Phases follow one another in file order; `with = "X"` starts a phase when X starts (the file model
already refuses two GPU phases in one `with` chain). A phase that runs variants gives each variant
its GPUs on one host, earliest free first, in the phase's order (greedy list scheduling): one GPU
runs them in a row, a 2-GPU bundle two side by side, two bundles split them across hosts. Human
preparation `before_window` is laid out before hour 0 and never counted against the window.
A phase with both `hours` and `variants` lasts as long as the longer of the two.

Nothing here prices anything: `runner.campaign.plan` compares schedules against plans and prices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runner.campaign.model import Campaign, Phase


@dataclass(frozen=True)
class Item:
    """One interval of the schedule: a phase, or one variant's run inside a phase."""

    kind: str  # "phase" or "variant"
    name: str  # the phase's name, or the variant's
    uses: str  # "gpu", "host" or "human"
    start_hours: float  # from the window's start (negative: before the window)
    end_hours: float
    phase: str  # the phase this interval belongs to (its own name for a phase)
    before_window: bool = False
    variant: str | None = None
    category: str | None = None
    host: int | None = None  # 0-based; only 1 unless scheduled for two bundles
    gpus: tuple[int, ...] = ()  # GPU indices on that host

    @property
    def hours(self) -> float:
        return self.end_hours - self.start_hours

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "uses": self.uses,
            "start_hours": round(self.start_hours, 6),
            "end_hours": round(self.end_hours, 6),
            "hours": round(self.hours, 6),
            "kind": self.kind,
            "phase": self.phase,
            "before_window": self.before_window,
        }
        if self.kind == "variant":
            out.update(
                variant=self.variant,
                category=self.category,
                host=self.host,
                gpu=self.gpus[0] if self.gpus else None,
                gpus=list(self.gpus),
            )
        return out


@dataclass(frozen=True)
class Schedule:
    items: tuple[Item, ...]
    window_hours: float
    retrieval_hours: float
    hosts: int
    gpus_per_host: int
    variants: tuple[str, ...]  # the variants scheduled (after any subset was taken)

    @property
    def end_of_work_hours(self) -> float:
        """When the last phase inside the window ends."""
        return max((i.end_hours for i in self.items if not i.before_window), default=0.0)

    @property
    def committed_hours(self) -> float:
        """From the window's start to the end of the last phase, plus the time to retrieve files."""
        return self.end_of_work_hours + self.retrieval_hours

    @property
    def uncommitted_hours(self) -> float:
        return max(0.0, self.window_hours - self.committed_hours)

    @property
    def over_hours(self) -> float:
        return max(0.0, self.committed_hours - self.window_hours)

    @property
    def fits(self) -> bool:
        return self.committed_hours <= self.window_hours + 1e-9

    @property
    def slack_fraction(self) -> float:
        """Uncommitted share of the window (negative when over)."""
        return (self.window_hours - self.committed_hours) / self.window_hours

    @property
    def before_window_hours(self) -> float:
        """Human preparation done before renting: reported, not counted."""
        return -min((i.start_hours for i in self.items if i.before_window), default=0.0)

    def fits_in(self, window_hours: float) -> bool:
        return self.committed_hours <= window_hours + 1e-9

    def phase_items(self) -> list[Item]:
        return [i for i in self.items if i.kind == "phase"]

    def variant_items(self) -> list[Item]:
        return [i for i in self.items if i.kind == "variant"]


def build_schedule(
    campaign: Campaign, *, variants: Iterable[str] | None = None, hosts: int = 1, window_hours: float | None = None
) -> Schedule:
    """Lay out `campaign` on `hosts` identical bundles, running only `variants` (default: all).

    `window_hours` defaults to the bundle's own window; pass another plan's to judge it instead.
    """
    if hosts < 1:
        raise ValueError("hosts must be at least 1")
    bundle = campaign.bundle
    keep = None if variants is None else set(variants)
    if keep is not None:
        unknown = keep - {v.name for v in campaign.variants}
        if unknown:
            raise ValueError(f"unknown variants: {', '.join(sorted(unknown))}")
    for v in campaign.variants:
        if v.gpus > bundle.gpus:
            raise ValueError(f"variant {v.name!r} needs {v.gpus} GPUs; one host has {bundle.gpus}")

    groups = _overlap_groups(campaign.phases)
    items: list[Item] = []
    scheduled: list[str] = []

    # Preparation before the window: stacked in file order so that the last one ends at hour 0.
    before = [g for g in groups if g[0].before_window]
    total_before = sum(max(p.hours or 0.0 for p in g) for g in before)
    cursor = -total_before
    for group in before:
        for p in group:
            items.append(Item("phase", p.name, p.uses, cursor, cursor + (p.hours or 0.0), p.name, before_window=True))
        cursor += max(p.hours or 0.0 for p in group)

    cursor = 0.0
    for group in (g for g in groups if not g[0].before_window):
        start, group_end = cursor, cursor
        for p in group:
            names = [n for n in p.variants if keep is None or n in keep]
            runs = _run_variants(campaign, p, names, start, hosts, bundle.gpus)
            if p.hours is None and not runs:
                continue  # every variant of this phase was dropped
            end = max([start + (p.hours or 0.0)] + [r.end_hours for r in runs])
            items.append(Item("phase", p.name, p.uses, start, end, p.name))
            items.extend(runs)
            scheduled.extend(r.name for r in runs if r.name not in scheduled)
            group_end = max(group_end, end)
        cursor = group_end

    return Schedule(
        items=tuple(items),
        window_hours=bundle.window_hours if window_hours is None else window_hours,
        retrieval_hours=bundle.retrieval_hours,
        hosts=hosts,
        gpus_per_host=bundle.gpus,
        variants=tuple(scheduled),
    )


def _overlap_groups(phases: tuple[Phase, ...]) -> list[list[Phase]]:
    """Phases grouped by `with` chain, in the file order of each chain's anchor (the phase that
    overlaps no other); members keep file order. The file model has already refused loops."""
    by_name = {p.name: p for p in phases}

    def anchor(p: Phase) -> str:
        seen = {p.name}
        while p.with_ is not None and p.with_ in by_name and p.with_ not in seen:
            p = by_name[p.with_]
            seen.add(p.name)
        return p.name

    groups: dict[str, list[Phase]] = {}
    for p in phases:
        groups.setdefault(anchor(p), []).append(p)
    order = {p.name: i for i, p in enumerate(phases)}
    return [groups[a] for a in sorted(groups, key=order.__getitem__)]


def _run_variants(
    campaign: Campaign, phase: Phase, names: list[str], start: float, hosts: int, gpus_per_host: int
) -> list[Item]:
    """Greedy list scheduling: each variant, in order, takes the host whose `gpus` GPUs free up
    first (lowest host, then lowest GPU index, on ties). A variant never spans two hosts."""
    free = [[start] * gpus_per_host for _ in range(hosts)]
    out: list[Item] = []
    for name in names:
        v = campaign.variant(name)
        if v.gpus == 0:  # runs on the host's CPU: takes no GPU slot
            out.append(
                Item(
                    "variant",
                    v.name,
                    "host",
                    start,
                    start + v.hours,
                    phase.name,
                    variant=v.name,
                    category=v.category,
                    host=0,
                )
            )
            continue
        best: tuple[float, int, list[int]] | None = None
        for h in range(hosts):
            order = sorted(range(gpus_per_host), key=lambda g: (free[h][g], g))[: v.gpus]
            ready = max(free[h][g] for g in order)
            if best is None or ready < best[0] - 1e-12:
                best = (ready, h, sorted(order))
        ready, h, gpus = best
        end = ready + v.hours
        for g in gpus:
            free[h][g] = end
        out.append(
            Item(
                "variant",
                v.name,
                "gpu",
                ready,
                end,
                phase.name,
                variant=v.name,
                category=v.category,
                host=h,
                gpus=tuple(gpus),
            )
        )
    return out
