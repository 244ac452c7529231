"""The pilot's re-estimate: every remaining item re-estimated from what was measured (step rates,
finished runs' real durations, checkpoint write and verify times), laid out again on the GPUs from
now in the launch order, and checked against the retrieval deadline."""

from __future__ import annotations

import sqlite3
import statistics
import time
from typing import Any

from runner.campaign.objects import Campaign, Variant
from runner.campaign.schedule import variant_rank
from runner.closing.deliverables import RunRecord
from runner.closing.ledger_reads import read_runs
from runner.closing.pilot_plan import scheduled_variants
from runner.ledger import pilot_rows as rows
from runner.ledger.states import PENDING_STATES, RunState

TOTAL_STEP_METRICS = ("total_steps", "max_steps", "steps_total")


def re_estimate(
    campaign: Campaign,
    conn: sqlite3.Connection,
    plan: dict[str, Any],
    runs: list[RunRecord] | None = None,
    now: float | None = None,
    cut: set[str] | None = None,
) -> dict[str, Any]:
    """Every remaining item re-estimated from measurements, laid out from now, against the window.

    - a running run with a step rate and a reported total step count: steps left / measured rate;
    - a variant not yet run: its planned hours times the measured speed factor (median of
      measured/planned over the variants measured so far; 1 when nothing was measured);
    - each remaining item adds its checkpoints' measured write time (a stall) and one final
      verification. Measured rates already include earlier stalls, so this errs long, not short.
    `cut`: the variants a decision took out of the queue.
    """
    now = time.time() if now is None else now
    runs = read_runs(conn) if runs is None else runs
    costs = rows.checkpoint_costs(conn)
    rates = rows.step_rates(conn)
    totals = rows.total_steps(conn, TOTAL_STEP_METRICS)
    factors: list[float] = []
    for r in runs:
        if r.state == RunState.FINISHED and r.planned_hours > 0 and r.active_seconds > 0:
            factors.append(r.active_seconds / 3600.0 / r.planned_hours)
        elif r.state == RunState.RUNNING and r.id in rates and r.id in totals and r.planned_hours > 0:
            rate = rates[r.id]
            left = max(totals[r.id] - rate.last_step, 0) / rate.per_second
            factors.append((rate.span_seconds + left) / 3600.0 / r.planned_hours)
    factor = statistics.median(factors) if factors else 1.0
    items = []
    cut = cut or set()
    for name in scheduled_variants(campaign, plan, conn):
        try:
            v = campaign.variant(name)
        except KeyError:
            continue
        mine = [r for r in runs if r.variant == name]
        running = [r for r in mine if r.state in PENDING_STATES]
        planned = v.hours
        if name in cut and not any(r.state == RunState.RUNNING for r in mine):
            items.append(_item(name, v, "cut", planned, 0.0, 0.0, "cut at the pilot decision"))
            continue
        if any(r.state == RunState.FINISHED for r in mine) or (mine and not running):
            done = sum(r.active_seconds for r in mine) / 3600.0
            items.append(_item(name, v, "done", planned, done, 0.0, f"ended ({mine[-1].state})"))
            continue
        if running and running[-1].state == RunState.RUNNING:
            r = running[-1]
            elapsed = _elapsed(conn, r, now)
            if r.id in rates and r.id in totals:
                rate = rates[r.id]
                steps_left = max(totals[r.id] - rate.last_step, 0)
                left = steps_left / rate.per_second
                basis = f"{rate.per_second:.3g} steps/s measured, {steps_left} steps left"
            else:
                left = max(planned * factor * 3600.0 - elapsed, 0.0)
                basis = "no total step count reported: planned hours x speed factor, minus elapsed"
            left_h = (left + _overhead(v, left, costs)) / 3600.0
            items.append(_item(name, v, "running", planned, elapsed / 3600.0, left_h, basis, run=r.id))
            continue
        base = planned * factor * 3600.0
        left_h = (base + _overhead(v, base, costs)) / 3600.0
        basis = f"planned {planned:g} h x speed factor {factor:.2f} + checkpoint costs"
        items.append(_item(name, v, "waiting", planned, 0.0, left_h, basis))
    end_h = _lay_out(campaign, items)
    tail_h = _tail_phase_hours(campaign)
    retrieve_by = campaign.bundle.retrieve_by.timestamp()
    projected_end = now + (end_h + tail_h) * 3600.0
    spare_h = (retrieve_by - projected_end) / 3600.0
    return {
        "computed_at": now,
        "speed_factor": round(factor, 4),
        "measured_runs": len(factors),
        "checkpoint_write_seconds": costs.write_seconds,
        "checkpoint_verify_seconds": costs.verify_seconds,
        "items": items,
        "remaining_hours": round(end_h + tail_h, 4),
        "tail_phase_hours": tail_h,
        "projected_end": projected_end,
        "retrieve_by": retrieve_by,
        "fits": spare_h >= 0,
        "spare_hours": round(max(spare_h, 0.0), 4),
        "over_hours": round(max(-spare_h, 0.0), 4),
    }


def _item(
    name: str,
    v: Variant,
    state: str,
    planned: float,
    elapsed_h: float,
    remaining_h: float,
    basis: str,
    run: str | None = None,
) -> dict[str, Any]:
    return {
        "variant": name,
        "category": v.category,
        "gpus": v.gpus,
        "state": state,
        "run": run,
        "planned_hours": planned,
        "elapsed_hours": round(elapsed_h, 4),
        "remaining_hours": round(remaining_h, 4),
        "basis": basis,
    }


def _overhead(v: Variant, seconds: float, costs: rows.CheckpointCosts) -> float:
    """Checkpoint stalls over `seconds` of work, plus verifying the final one."""
    write = costs.write_seconds or 0.0
    n = int(seconds // v.checkpoint_every_s) if v.checkpoint_every_s else 0
    return n * write + write + (costs.verify_seconds or 0.0)


def attempt_started_at(conn: sqlite3.Connection, run: RunRecord) -> float | None:
    """When the run's current attempt launched (its first launch when the ledger says nothing)."""
    return rows.attempt_started_at(conn, run.id) or run.launched_at


def _elapsed(conn: sqlite3.Connection, run: RunRecord, now: float) -> float:
    """Active seconds: the ended attempts plus the current one since it launched."""
    since = attempt_started_at(conn, run)
    return run.active_seconds + (max(now - since, 0.0) if since else 0.0)


def _lay_out(campaign: Campaign, items: list[dict]) -> float:
    """Hours from now until the remaining items end: running ones first, then the rest in the
    launch order (runner.campaign.schedule.variant_rank), each on the slots that free up first."""
    slots = [0.0] * max(campaign.bundle.gpus, 1)
    rank = variant_rank(campaign)
    pending = [i for i in items if i["remaining_hours"] > 0]
    pending.sort(key=lambda i: (i["state"] != "running", rank(i["variant"])))
    end = 0.0
    for item in pending:
        need = min(max(item["gpus"], 1), len(slots))
        slots.sort()
        start = slots[need - 1]
        finish = start + item["remaining_hours"]
        for k in range(need):
            slots[k] = finish
        end = max(end, finish)
    return end


def _tail_phase_hours(campaign: Campaign) -> float:
    """Planned hours of the phases after the last phase that runs variants (analysis, packing)."""
    last = max((i for i, p in enumerate(campaign.phases) if p.variants), default=None)
    if last is None:
        return 0.0
    return sum(p.hours or 0.0 for p in campaign.phases[last + 1 :] if not p.before_window and p.with_ is None)
