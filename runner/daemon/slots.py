"""GPU slots and launch order: how many runs go at once, on which devices, and who goes next.

One run per GPU slot. The slot count comes from NVML, checked against the bundle's GPUs (a host
with more GPUs than were rented uses only the rented number; one with fewer uses what it has and
says so). A host without a usable GPU gets one slot, with `CUDA_VISIBLE_DEVICES=""`. The
`CAMPAIGN_SLOTS` environment variable overrides the count (tests, the demo on CPU) and is reported
as such. The queue goes in the plan's launch order (runner.campaign.schedule.variant_rank): phase
by phase, essential, useful, exploratory within a phase, the phase's own order within a category.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runner.campaign.objects import Campaign
from runner.campaign.schedule import launch_order, variant_rank
from runner.ledger.records import RunRecord

SLOTS_ENV = "CAMPAIGN_SLOTS"


@dataclass(frozen=True)
class SlotPlan:
    labels: tuple[str, ...]  # the CUDA_VISIBLE_DEVICES value each slot gives ("" on CPU)
    keys: tuple[str, ...]  # the ledger's gpu_slot for each slot ("0", "1", or "cpu0", ...)
    note: str  # how the count was decided, in words

    @property
    def total(self) -> int:
        return len(self.keys)


def plan_slots(
    campaign: Campaign, *, gpu_count: int | None, nvml_error: str | None, env: Mapping[str, str] | None = None
) -> SlotPlan:
    """The slots for this host. `gpu_count` from `Nvml.device_count()` (None or 0: no GPU)."""
    environ: Mapping[str, str] = os.environ if env is None else env
    rented = campaign.bundle.gpus
    gpus = gpu_count or 0
    override = environ.get(SLOTS_ENV, "").strip()
    if override:
        try:
            n = int(override)
        except ValueError:
            n = 0
        if n >= 1:
            if gpus >= n:
                return SlotPlan(
                    tuple(str(i) for i in range(n)),
                    tuple(str(i) for i in range(n)),
                    f"{n} slots set by {SLOTS_ENV} (GPUs 0-{n - 1})",
                )
            return SlotPlan(
                ("",) * n,
                tuple(f"cpu{i}" for i in range(n)),
                f"{n} slots set by {SLOTS_ENV}, without GPUs (this host has {gpus})",
            )
    if gpus <= 0:
        why = nvml_error or "no GPU found"
        return SlotPlan(("",), ("cpu0",), f"1 slot on the CPU: {why}")
    if gpus > rented:
        return SlotPlan(
            tuple(str(i) for i in range(rented)),
            tuple(str(i) for i in range(rented)),
            f"{rented} slots: the host shows {gpus} GPUs, the bundle rents {rented}",
        )
    note = f"{gpus} slot{'s' if gpus != 1 else ''}, one per GPU"
    if gpus < rented:
        note += f" (the bundle rents {rented} GPUs but the host shows {gpus}: check the order)"
    return SlotPlan(tuple(str(i) for i in range(gpus)), tuple(str(i) for i in range(gpus)), note)


def order_key(campaign: Campaign) -> Callable[[RunRecord], tuple]:
    """Sort key for runs waiting to launch: the plan's launch order, then when each was queued."""
    rank = variant_rank(campaign)

    def key(run: RunRecord) -> tuple:
        return (*rank(run.variant), run.queued_at or 0.0)

    return key


def initial_queue(campaign: Campaign) -> list[str]:
    """The variants the runner queues by itself: those named in a phase, in launch order."""
    in_phases = {name: None for phase in campaign.phases for name in phase.variants}
    return launch_order(campaign, in_phases)
