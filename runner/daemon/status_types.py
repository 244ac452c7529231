"""The status snapshot and its deltas as typed structs (docs/INTERNALS.md, "Status snapshot").

Field order is the JSON's key order, so `campaign status --json` reads as documented. Floats are
made finite-or-text (`fin`) when a struct is built, so encoding never meets a NaN: JSON has none,
and the runner sends "nan", "inf", "-inf" instead. New top-level parts go at the end of `Snapshot`
and `Delta` with a default, so older consoles that ignore them keep working.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from runner.ledger.states import RuleStatus, RunState

Num = float | str | None  # a float, or "nan"/"inf"/"-inf" for the non-finite ones


def fin(x: Any) -> Any:
    """`x`, with a non-finite float as the string "nan", "inf" or "-inf"."""
    if type(x) is float and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


class RuleState(msgspec.Struct):
    kind: str
    text: str
    state: RuleStatus
    value: Num


class RunRow(msgspec.Struct):
    """One run as the snapshot shows it (one row of the console's table)."""

    id: str
    variant: str
    category: str
    state: RunState
    pid: int | None
    step: int | None
    loss: Num
    metrics: dict[str, Num]
    checkpoint_path: str | None
    checkpoint_step: int | None
    checkpoint_verified: bool | None
    checkpoint_problem: str | None
    verify_waiting: int  # checkpoints seen, newer than the newest judged, not yet judged
    verify_lag_seconds: Num  # how long the oldest of them has waited (moves with the clock)
    next_checkpoint_seconds: Num
    stop_reason: str | None
    stop_rule: str | None
    stop_value: Any
    launched_at: float | None
    ended_at: float | None
    elapsed_seconds: Num
    planned_hours: float | None
    expected_hours: Num
    attempts: int
    gpu_slot: str | None
    run_dir: str
    lines: int
    bad_lines: int
    step_rate: Num
    rules: list[RuleState]
    # stdout lines the variant's metrics_regex/metrics_format matched without giving a number,
    # and the warning in words once 3 or more came and none parsed (None: nothing to say)
    matched_no_numbers: int = 0
    metrics_warning: str | None = None


class CampaignInfo(msgspec.Struct):
    name: str
    question: str
    root: str
    file: str


class BundleInfo(msgspec.Struct):
    provider: str | None
    gpu: str
    days: Any
    plan: str | None
    price_usd: float | None
    gpus: int
    order_ref: str | None
    started_at: str
    expires_at: str
    remaining_seconds: float
    retrieve_by: str
    retrieve_seconds: float
    warning: str


class VariantInfo(msgspec.Struct):
    name: str
    category: str
    hours: float
    runs: list[str]


class Snapshot(msgspec.Struct, omit_defaults=True):
    """The whole status: the `status` op's result and `campaign status --json`."""

    now: float
    campaign: CampaignInfo
    bundle: BundleInfo
    gpus: list[dict[str, Any]]
    nvml_error: str | None
    slots: dict[str, Any]
    runner: dict[str, Any] | None
    runs: list[RunRow]
    queue: list[str]
    variants: list[VariantInfo]
    pilot: Any
    events: list[dict[str, Any]]
    retrieval: Any  # the last verified `campaign pull` (null: not yet)
    seq: int = 0  # the runner's change counter this snapshot is current to (0: read offline)
    runner_error: str | None = None  # only when no runner answered
    # this runner process's mark: a `seq` means something only to the runner that gave it ("": offline)
    epoch: str = ""


class Delta(msgspec.Struct, omit_defaults=True):
    """What changed since a subscriber's last `seq`: the runs that changed, in full, and the
    campaign-wide parts (small) as they are now. `variants` is sent only when it changed."""

    seq: int
    since: int
    now: float
    bundle: BundleInfo
    gpus: list[dict[str, Any]]
    nvml_error: str | None
    slots: dict[str, Any]
    runner: dict[str, Any] | None
    runs: list[RunRow]
    queue: list[str]
    pilot: Any
    events: list[dict[str, Any]]
    retrieval: Any
    variants: list[VariantInfo] | None = None
    epoch: str = ""  # as in Snapshot


def apply_delta(state: dict[str, Any], index: dict[str, int], delta: dict[str, Any]) -> list[str]:
    """Bring a decoded snapshot `state` up to a decoded `delta`, in place; `index` maps run id ->
    position in `state["runs"]` (kept up to date here). Returns the ids of the runs that changed.
    Costs what the delta holds, not what the state holds."""
    runs: list[dict[str, Any]] = state.setdefault("runs", [])
    changed = []
    for row in delta.get("runs") or []:
        rid = row["id"]
        pos = index.get(rid)
        if pos is None:
            index[rid] = len(runs)
            runs.append(row)
        else:
            runs[pos] = row
        changed.append(rid)
    for key, value in delta.items():
        if key in ("runs", "since"):
            continue
        if key == "variants" and value is None:
            continue
        state[key] = value
    return changed


def index_runs(state: dict[str, Any]) -> dict[str, int]:
    """Run id -> position in a decoded snapshot's `runs`."""
    return {r["id"]: i for i, r in enumerate(state.get("runs") or [])}
