"""The campaign's phases laid out in time, in hours from the rental window's start.

Phases follow one another in file order; `with = "X"` starts a phase when X starts (the file model
already refuses two GPU phases in one `with` chain). A phase that runs variants gives each variant
its GPUs on one host, earliest free first, in the phase's order (greedy list scheduling): one GPU
runs them in a row, a 2-GPU bundle two side by side, two bundles split them across hosts. Human
preparation `before_window` is laid out before hour 0 and never counted against the window.
With `[[host]]` tables, hour 0 is the earliest host's window start and each host is a lane: a
variant placed on a host runs there, the others go to the host whose GPUs free up first, none
starts before its host's window opens, and each lane is judged against its own window.
A phase with both `hours` and `variants` lasts as long as the longer of the two.
Within a phase, variants go in the launch order (`variant_rank`), the one the runner's queue uses,
so the plan's start times are the order in which runs will launch.

Nothing here prices anything: `runner.campaign.plan` compares schedules against plans and prices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from runner.campaign.objects import CATEGORIES, Campaign, Phase


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
class Lane:
    """One declared host's share of the schedule, against its own window."""

    host: str
    gpus: int
    opens_hours: float  # its window's start, in hours from the schedule's hour 0
    window_hours: float
    retrieval_hours: float
    end_of_work_hours: float  # from hour 0: the last phase or variant this host takes part in
    variants: tuple[str, ...]

    @property
    def closes_hours(self) -> float:
        return self.opens_hours + self.window_hours

    @property
    def committed_hours(self) -> float:
        """From its own window's start to the end of its work, plus the time to retrieve files."""
        return max(0.0, self.end_of_work_hours - self.opens_hours) + self.retrieval_hours

    @property
    def over_hours(self) -> float:
        return max(0.0, self.committed_hours - self.window_hours)

    @property
    def fits(self) -> bool:
        return self.committed_hours <= self.window_hours + 1e-9


@dataclass(frozen=True)
class Schedule:
    items: tuple[Item, ...]
    window_hours: float
    retrieval_hours: float
    hosts: int
    gpus_per_host: int
    variants: tuple[str, ...]  # the variants scheduled (after any subset was taken)
    lanes: tuple[Lane, ...] = ()  # one per [[host]]; empty for a campaign on one host

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
        if self.lanes:
            return min(max(0.0, ln.window_hours - ln.committed_hours) for ln in self.lanes)
        return max(0.0, self.window_hours - self.committed_hours)

    @property
    def over_hours(self) -> float:
        if self.lanes:
            return max(ln.over_hours for ln in self.lanes)
        return max(0.0, self.committed_hours - self.window_hours)

    @property
    def fits(self) -> bool:
        if self.lanes:
            return all(ln.fits for ln in self.lanes)
        return self.committed_hours <= self.window_hours + 1e-9

    @property
    def slack_fraction(self) -> float:
        """Uncommitted share of the window (negative when over); with hosts, the tightest lane's."""
        if self.lanes:
            return min((ln.window_hours - ln.committed_hours) / ln.window_hours for ln in self.lanes)
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


def variant_rank(campaign: Campaign) -> Callable[[str | None], tuple[int, int, int]]:
    """The launch order, shared by the plan and the runner's queue: the first phase that names the
    variant (variants in no phase after every phase), then the category (essential, useful,
    exploratory), then the variant's place in that phase's list (in the file, for the rest)."""
    first: dict[str, tuple[int, int]] = {}
    for pi, phase in enumerate(campaign.phases):
        for vi, name in enumerate(phase.variants):
            first.setdefault(name, (pi, vi))
    files = {v.name: i for i, v in enumerate(campaign.variants)}
    cats = {v.name: v.category for v in campaign.variants}
    last = len(campaign.phases)

    def rank(name: str | None) -> tuple[int, int, int]:
        name = name or ""
        cat = cats.get(name)
        cat_rank = CATEGORIES.index(cat) if cat in CATEGORIES else len(CATEGORIES)
        phase, place = first.get(name, (last, files.get(name, len(files))))
        return (phase, cat_rank, place)

    return rank


def launch_order(campaign: Campaign, names: Iterable[str]) -> list[str]:
    """`names` sorted in the launch order (see `variant_rank`)."""
    return sorted(names, key=variant_rank(campaign))


def build_schedule(
    campaign: Campaign,
    *,
    variants: Iterable[str] | None = None,
    hosts: int | None = None,
    window_hours: float | None = None,
) -> Schedule:
    """Lay out `campaign` on `hosts` identical bundles, running only `variants` (default: all).
    Without `hosts`, a campaign with [[host]] tables is laid out on those hosts, one lane each.

    `window_hours` defaults to the bundle's own window; pass another plan's to judge it instead.
    """
    if hosts is not None and hosts < 1:
        raise ValueError("hosts must be at least 1")
    bundle = campaign.bundle
    keep = None if variants is None else set(variants)
    if keep is not None:
        unknown = keep - {v.name for v in campaign.variants}
        if unknown:
            raise ValueError(f"unknown variants: {', '.join(sorted(unknown))}")
    declared = hosts is None and bool(campaign.hosts)
    if declared:
        origin = min(h.bundle.started_at for h in campaign.hosts)
        specs = [_Spec(h.bundle.gpus, (h.bundle.started_at - origin).total_seconds() / 3600) for h in campaign.hosts]
        index = {h.name: n for n, h in enumerate(campaign.hosts)}
        pinned = {v.name: index[v.host] for v in campaign.variants if v.host is not None}
    else:
        specs = [_Spec(bundle.gpus, 0.0)] * (hosts or 1)
        pinned = {}
    for v in campaign.variants:
        if v.gpus > max(sp.gpus for sp in specs):
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
            names = launch_order(campaign, (n for n in p.variants if keep is None or n in keep))
            runs = _run_variants(campaign, p, names, start, specs, pinned)
            if p.hours is None and not runs:
                continue  # every variant of this phase was dropped
            end = max([start + (p.hours or 0.0)] + [r.end_hours for r in runs])
            items.append(Item("phase", p.name, p.uses, start, end, p.name))
            items.extend(runs)
            scheduled.extend(r.name for r in runs if r.name not in scheduled)
            group_end = max(group_end, end)
        cursor = group_end

    if not declared:
        return Schedule(
            items=tuple(items),
            window_hours=bundle.window_hours if window_hours is None else window_hours,
            retrieval_hours=bundle.retrieval_hours,
            hosts=hosts or 1,
            gpus_per_host=bundle.gpus,
            variants=tuple(scheduled),
        )
    lanes = _lanes(campaign, items, specs)
    return Schedule(
        items=tuple(items),
        window_hours=max(ln.closes_hours for ln in lanes),
        retrieval_hours=max(ln.retrieval_hours for ln in lanes),
        hosts=len(lanes),
        gpus_per_host=max(sp.gpus for sp in specs),
        variants=tuple(scheduled),
        lanes=lanes,
    )


@dataclass(frozen=True)
class _Spec:
    gpus: int
    opens_hours: float  # no variant starts on this host before its window opens


def _lanes(campaign: Campaign, items: list[Item], specs: list[_Spec]) -> tuple[Lane, ...]:
    """Each host's lane: phases without variants are every host's work (setup, analysis of its own
    results); a host holds its files until the last of them, or of its own variants, ends."""
    shared = [i.end_hours for i in items if i.kind == "phase" and not i.before_window]
    out = []
    for n, (h, sp) in enumerate(zip(campaign.hosts, specs, strict=True)):
        own = [i for i in items if i.kind == "variant" and i.host == n]
        out.append(
            Lane(
                host=h.name,
                gpus=sp.gpus,
                opens_hours=sp.opens_hours,
                window_hours=h.bundle.window_hours,
                retrieval_hours=h.bundle.retrieval_hours,
                end_of_work_hours=max(shared + [i.end_hours for i in own], default=sp.opens_hours),
                variants=tuple(dict.fromkeys(i.name for i in own)),
            )
        )
    return tuple(out)


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
    campaign: Campaign, phase: Phase, names: list[str], start: float, specs: list[_Spec], pinned: dict[str, int]
) -> list[Item]:
    """Greedy list scheduling: each variant, in order, takes the host whose `gpus` GPUs free up
    first (lowest host, then lowest GPU index, on ties), or the host it is placed on. A variant
    never spans two hosts."""
    free = [[max(start, sp.opens_hours)] * sp.gpus for sp in specs]
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
                    host=pinned.get(v.name, 0),
                )
            )
            continue
        best: tuple[float, int, list[int]] | None = None
        for h, sp in enumerate(specs):
            if (name in pinned and pinned[name] != h) or v.gpus > sp.gpus:
                continue
            order = sorted(range(sp.gpus), key=lambda g: (free[h][g], g))[: v.gpus]
            ready = max(free[h][g] for g in order)
            if best is None or ready < best[0] - 1e-12:
                best = (ready, h, sorted(order))
        if best is None:  # the bundle rents at least one GPU (the campaign file says so)
            raise ValueError(f"no host to place {name} on")
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
