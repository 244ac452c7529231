"""The pilot decision point: when the pilot is over, re-estimate what is left and ask for a decision.

The plan is frozen when the runner first starts (ledger `meta` key `plan_frozen`); it is compared
with what happens, never rewritten. The pilot is complete when the first run of every scheduled
variant reached its first checkpoint (or ended before one), or, when the file has a phase named
`pilot`, once that phase ended. Then every remaining item is re-estimated from what was measured
(step rates, finished runs' real durations, checkpoint write and verify times), laid out again on
the GPUs from now, and checked against the retrieval deadline. The user decides: continue, cut to
chosen variants, or revisit the question; the ledger records who, what and when.

The runner (daemon) calls `pilot_status` and `record_decision` with its own writable connection.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from typing import Any

from runner.campaign.errors import CampaignError
from runner.campaign.model import CATEGORIES, Campaign
from runner.closing.deliverables import TERMINAL_STATES, RunRecord, read_runs

CHOICES = ("continue", "cut", "revisit")
TOTAL_STEP_METRICS = ("total_steps", "max_steps", "steps_total")


# ---------------------------------------------------------------------------------------------
# The frozen plan


def frozen_plan(conn: sqlite3.Connection) -> dict[str, Any] | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'plan_frozen'").fetchone()
    if row is None:
        return None
    try:
        value = json.loads(row["value"])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def plan_snapshot(campaign: Campaign, now: float | None = None) -> dict[str, Any]:
    """The schedule as `plan --json` gives it, stamped with when it was frozen."""
    from runner.campaign.plan import plan_campaign

    return {"frozen_at": time.time() if now is None else now, **plan_campaign(campaign).to_json()}


def ensure_frozen_plan(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> dict[str, Any]:
    """The frozen plan; written now (once) when the runner did not freeze one."""
    plan = frozen_plan(conn)
    if plan is not None:
        return plan
    plan = plan_snapshot(campaign, now)
    try:
        cur = conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('plan_frozen', ?)", (json.dumps(plan),))
    except sqlite3.OperationalError:  # a read-only reader (status without a runner): freeze nothing
        return plan
    if cur.rowcount:
        conn.execute(
            "INSERT INTO events(t, run_id, kind, data) VALUES (?, NULL, 'plan_frozen', ?)",
            (plan["frozen_at"], json.dumps({"committed_hours": plan.get("committed_hours"), "fits": plan.get("fits")})),
        )
        return plan
    return frozen_plan(conn) or plan


def scheduled_variants(campaign: Campaign, plan: dict[str, Any]) -> list[str]:
    """The variants the frozen plan runs, in plan order (every declared one if it names none)."""
    names: list[str] = []
    for item in plan.get("items", []):
        if item.get("kind") == "variant" and item.get("name") not in names:
            names.append(item["name"])
    return names or [v.name for v in campaign.variants]


# ---------------------------------------------------------------------------------------------
# Pilot status


def pilot_status(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> dict[str, Any] | None:
    """Where the pilot stands; None until the first run was launched (nothing measured yet).

    state: "running" (pilot not over), "awaiting_decision", or "decided" (a decision is recorded)."""
    now = time.time() if now is None else now
    plan = ensure_frozen_plan(campaign, conn, now)
    runs = read_runs(conn)
    if not any(r.launched_at is not None for r in runs):
        return None
    scope = scheduled_variants(campaign, plan)
    first_ckpt = _first_checkpoints(conn)
    progress = _variant_progress(scope, runs, first_ckpt)
    complete, completed_at, basis = _completion(campaign, plan, scope, runs, progress, now)
    if complete:
        _note_completion(conn, completed_at, basis)
    decisions = list_decisions(conn)
    state = "decided" if decisions else ("awaiting_decision" if complete else "running")
    return {
        "state": state,
        "complete": complete,
        "completed_at": completed_at,
        "basis": basis,
        "plan_frozen_at": plan.get("frozen_at"),
        "variants": progress,
        "estimate": re_estimate(campaign, conn, plan, runs, now),
        "decision": decisions[-1] if decisions else None,
        "choices": list(CHOICES),
        "question": campaign.question,
    }


def _first_checkpoints(conn: sqlite3.Connection) -> dict[str, float]:
    rows = conn.execute("SELECT run_id, MIN(t) AS t FROM checkpoints GROUP BY run_id").fetchall()
    return {r["run_id"]: r["t"] for r in rows}


def _variant_progress(scope: list[str], runs: list[RunRecord], first_ckpt: dict[str, float]) -> list[dict]:
    """For each scheduled variant: its first run, and whether (and when) it reached the pilot mark."""
    out = []
    for name in scope:
        launched = [r for r in runs if r.variant == name and r.launched_at is not None]
        if not launched:
            out.append({"variant": name, "run": None, "reached": False, "how": None, "at": None})
            continue
        first = min(launched, key=lambda r: r.launched_at)
        if first.id in first_ckpt:
            out.append(
                {"variant": name, "run": first.id, "reached": True, "how": "checkpoint", "at": first_ckpt[first.id]}
            )
        elif first.state in TERMINAL_STATES:
            out.append(
                {
                    "variant": name,
                    "run": first.id,
                    "reached": True,
                    "how": f"ended ({first.state})",
                    "at": first.ended_at or first.launched_at,
                }
            )
        else:
            out.append({"variant": name, "run": first.id, "reached": False, "how": None, "at": None})
    return out


def _completion(
    campaign: Campaign, plan: dict, scope: list[str], runs: list[RunRecord], progress: list[dict], now: float
) -> tuple[bool, float | None, str]:
    pilot = next((p for p in campaign.phases if p.name.strip().lower() == "pilot"), None)
    if pilot is not None:
        basis = "the phase 'pilot' ended"
        if pilot.variants:
            ends = []
            for name in pilot.variants:
                mine = [r for r in runs if r.variant == name]
                if not mine or any(r.state not in TERMINAL_STATES for r in mine):
                    return False, None, basis
                ends.append(max(r.ended_at or 0.0 for r in mine))
            return True, max(ends), basis
        item = next(
            (i for i in plan.get("items", []) if i.get("kind") == "phase" and i.get("name") == pilot.name), None
        )
        end = campaign.bundle.started_at.timestamp() + 3600.0 * float(item["end_hours"]) if item else None
        return (end is not None and now >= end), (end if end is not None and now >= end else None), basis
    basis = "the first run of every variant reached its first checkpoint"
    if all(p["reached"] for p in progress):
        return True, max((p["at"] or 0.0) for p in progress), basis
    return False, None, basis


def _note_completion(conn: sqlite3.Connection, at: float | None, basis: str) -> None:
    """Record once, in the ledger, that the pilot is over (the console's log shows it)."""
    if conn.execute("SELECT 1 FROM meta WHERE key = 'pilot_complete'").fetchone() is not None:
        return
    try:
        cur = conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('pilot_complete', ?)",
            (json.dumps({"at": at, "basis": basis}),),
        )
    except sqlite3.OperationalError:  # read-only reader
        return
    if cur.rowcount:
        conn.execute(
            "INSERT INTO events(t, run_id, kind, data) VALUES (?, NULL, 'pilot_complete', ?)",
            (at or time.time(), json.dumps({"basis": basis})),
        )


# ---------------------------------------------------------------------------------------------
# The re-estimate


def re_estimate(
    campaign: Campaign,
    conn: sqlite3.Connection,
    plan: dict[str, Any],
    runs: list[RunRecord] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Every remaining item re-estimated from measurements, laid out from now, against the window.

    - a running run with a step rate and a reported total step count: steps left / measured rate;
    - a variant not yet run: its planned hours times the measured speed factor (median of
      measured/planned over the variants measured so far; 1 when nothing was measured);
    - each remaining item adds its checkpoints' measured write time (a stall) and one final
      verification. Measured rates already include earlier stalls, so this errs long, not short.
    """
    now = time.time() if now is None else now
    runs = read_runs(conn) if runs is None else runs
    write_s, verify_s = _checkpoint_costs(conn)
    rates = _step_rates(conn)
    totals = _total_steps(conn)
    factors: list[float] = []
    for r in runs:
        if r.state == "finished" and r.planned_hours > 0 and r.active_seconds > 0:
            factors.append(r.active_seconds / 3600.0 / r.planned_hours)
        elif r.state == "running" and r.id in rates and r.id in totals and r.planned_hours > 0:
            rate, last_step, elapsed = rates[r.id]
            factors.append((elapsed + max(totals[r.id] - last_step, 0) / rate) / 3600.0 / r.planned_hours)
    factor = statistics.median(factors) if factors else 1.0
    items = []
    cut = _cut_variants(conn)
    for name in scheduled_variants(campaign, plan):
        try:
            v = campaign.variant(name)
        except KeyError:
            continue
        mine = [r for r in runs if r.variant == name]
        running = [r for r in mine if r.state in ("running", "queued")]
        planned = v.hours
        if name in cut and not any(r.state == "running" for r in mine):
            items.append(_item(name, v, "cut", planned, 0.0, 0.0, "cut at the pilot decision"))
            continue
        if any(r.state == "finished" for r in mine) or (mine and not running):
            done = sum(r.active_seconds for r in mine) / 3600.0
            items.append(_item(name, v, "done", planned, done, 0.0, f"ended ({mine[-1].state})"))
            continue
        if running and running[-1].state == "running":
            r = running[-1]
            elapsed = _elapsed(conn, r, now)
            if r.id in rates and r.id in totals:
                rate, last_step, _ = rates[r.id]
                left = max(totals[r.id] - last_step, 0) / rate
                basis = f"{rate:.3g} steps/s measured, {max(totals[r.id] - last_step, 0)} steps left"
            else:
                left = max(planned * factor * 3600.0 - elapsed, 0.0)
                basis = "no total step count reported: planned hours x speed factor, minus elapsed"
            left_h = (left + _overhead(v, left, write_s, verify_s)) / 3600.0
            items.append(_item(name, v, "running", planned, elapsed / 3600.0, left_h, basis, run=r.id))
            continue
        base = planned * factor * 3600.0
        left_h = (base + _overhead(v, base, write_s, verify_s)) / 3600.0
        items.append(
            _item(
                name,
                v,
                "waiting",
                planned,
                0.0,
                left_h,
                f"planned {planned:g} h x speed factor {factor:.2f} + checkpoint costs",
            )
        )
    end_h = _lay_out(campaign, items)
    tail_h = _tail_phase_hours(campaign, plan)
    retrieve_by = campaign.bundle.retrieve_by.timestamp()
    projected_end = now + (end_h + tail_h) * 3600.0
    spare_h = (retrieve_by - projected_end) / 3600.0
    return {
        "computed_at": now,
        "speed_factor": round(factor, 4),
        "measured_runs": len(factors),
        "checkpoint_write_seconds": write_s,
        "checkpoint_verify_seconds": verify_s,
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
    name: str, v, state: str, planned: float, elapsed_h: float, remaining_h: float, basis: str, run: str | None = None
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


def _checkpoint_costs(conn: sqlite3.Connection) -> tuple[float | None, float | None]:
    row = conn.execute("SELECT AVG(write_seconds) AS w, AVG(verify_seconds) AS v FROM checkpoints").fetchone()
    return (row["w"], row["v"]) if row else (None, None)


def _overhead(v, seconds: float, write_s: float | None, verify_s: float | None) -> float:
    """Checkpoint stalls over `seconds` of work, plus verifying the final one."""
    n = int(seconds // v.checkpoint_every_s) if v.checkpoint_every_s else 0
    return n * (write_s or 0.0) + (write_s or 0.0) + (verify_s or 0.0)


def _step_rates(conn: sqlite3.Connection) -> dict[str, tuple[float, int, float]]:
    """run -> (steps per second, last step, seconds covered) from the metric stream's summary."""
    out = {}
    for r in conn.execute("SELECT * FROM run_progress"):
        if None in (r["first_t"], r["last_t"], r["first_step"], r["last_step"]):
            continue
        span, steps = r["last_t"] - r["first_t"], r["last_step"] - r["first_step"]
        if span > 0 and steps > 0:
            out[r["run_id"]] = (steps / span, r["last_step"], span)
    return out


def _total_steps(conn: sqlite3.Connection) -> dict[str, int]:
    marks = ",".join("?" * len(TOTAL_STEP_METRICS))
    rows = conn.execute(f"SELECT run_id, value FROM metric_last WHERE name IN ({marks})", TOTAL_STEP_METRICS)
    return {r["run_id"]: int(r["value"]) for r in rows if r["value"] is not None and r["value"] > 0}


def attempt_started_at(conn: sqlite3.Connection, run: RunRecord) -> float | None:
    """When the run's current attempt launched: the runner's column, else its last launch event."""
    try:
        row = conn.execute("SELECT attempt_started_at FROM runs WHERE id = ?", (run.id,)).fetchone()
        if row is not None and row[0] is not None:
            return float(row[0])
    except sqlite3.OperationalError:  # a ledger from before the column was added
        pass
    row = conn.execute(
        "SELECT MAX(t) AS t FROM events WHERE run_id = ? AND kind IN ('launched', 'resumed')", (run.id,)
    ).fetchone()
    return row["t"] if row and row["t"] is not None else run.launched_at


def _elapsed(conn: sqlite3.Connection, run: RunRecord, now: float) -> float:
    """Active seconds: the ended attempts plus the current one since it launched."""
    since = attempt_started_at(conn, run)
    return run.active_seconds + (max(now - since, 0.0) if since else 0.0)


def _lay_out(campaign: Campaign, items: list[dict]) -> float:
    """Hours from now until the remaining items end: running ones first, then the rest by category
    and file order, each on the GPU slots that free up first (as the runner launches them)."""
    slots = [0.0] * max(campaign.bundle.gpus, 1)
    order = {c: i for i, c in enumerate(CATEGORIES)}
    pending = [i for i in items if i["remaining_hours"] > 0]
    pending.sort(key=lambda i: (i["state"] != "running", order.get(i["category"], 9)))
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


def _tail_phase_hours(campaign: Campaign, plan: dict[str, Any]) -> float:
    """Planned hours of the phases after the last phase that runs variants (analysis, packing)."""
    last = max((i for i, p in enumerate(campaign.phases) if p.variants), default=None)
    if last is None:
        return 0.0
    return sum(p.hours or 0.0 for p in campaign.phases[last + 1 :] if not p.before_window and p.with_ is None)


# ---------------------------------------------------------------------------------------------
# Decisions


def list_decisions(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    out = []
    for r in conn.execute("SELECT * FROM decisions ORDER BY seq"):
        out.append(
            {
                "seq": r["seq"],
                "t": r["t"],
                "who": r["who"],
                "choice": r["choice"],
                "variants": json.loads(r["variants"] or "[]"),
                "note": r["note"],
                "estimate": json.loads(r["estimate"]) if r["estimate"] else None,
            }
        )
    return out


def _cut_variants(conn: sqlite3.Connection) -> set[str]:
    """Variants dropped by the latest decision (a later `continue` keeps the earlier cut)."""
    kept: set[str] | None = None
    for d in list_decisions(conn):
        if d["choice"] == "cut":
            kept = set(d["variants"])
    if kept is None:
        return set()
    names = {r["variant"] for r in conn.execute("SELECT DISTINCT variant FROM runs")}
    plan = frozen_plan(conn) or {}
    names |= {i.get("name") for i in plan.get("items", []) if i.get("kind") == "variant"}
    return {n for n in names if n and n not in kept}


def record_decision(
    conn: sqlite3.Connection,
    campaign: Campaign,
    choice: str,
    variants: list[str] | None,
    note: str | None,
    who: str,
    now: float | None = None,
) -> dict[str, Any]:
    """Record the decision with the re-estimate it was taken on; mark queued runs it cuts.

    `cut` keeps `variants` (declared names, at least one) and drops the rest; the runner removes
    the dropped variants from its queue (`dropped` in the result). Bad input raises CampaignError."""
    now = time.time() if now is None else now
    choice = (choice or "").strip().lower()
    if choice not in CHOICES:
        raise CampaignError(f"choice must be one of {', '.join(CHOICES)}, got {choice!r}", field="choice")
    if not who or not str(who).strip():
        raise CampaignError("say who decides (user@host, or 'console')", field="who")
    declared = [v.name for v in campaign.variants]
    kept = list(dict.fromkeys(variants or []))
    if choice == "cut":
        unknown = [n for n in kept if n not in declared]
        if unknown:
            raise CampaignError(
                f"not declared in the campaign file: {', '.join(unknown)}", file=campaign.path, field="variants"
            )
        if not kept:
            raise CampaignError("a cut keeps at least one variant: name the ones to keep", field="variants")
    else:
        kept = []
    status = pilot_status(campaign, conn, now)
    estimate = (
        status["estimate"] if status else re_estimate(campaign, conn, ensure_frozen_plan(campaign, conn, now), now=now)
    )
    dropped = [n for n in declared if n not in kept] if choice == "cut" else []
    conn.execute("BEGIN IMMEDIATE")
    try:
        cur = conn.execute(
            "INSERT INTO decisions(t, who, choice, variants, note, estimate) VALUES (?, ?, ?, ?, ?, ?)",
            (now, str(who), choice, json.dumps(kept), note, json.dumps(estimate)),
        )
        seq = cur.lastrowid
        marked: list[str] = []
        if dropped:
            marks = ",".join("?" * len(dropped))
            marked = [
                r["id"]
                for r in conn.execute(f"SELECT id FROM runs WHERE state = 'queued' AND variant IN ({marks})", dropped)
            ]
            conn.execute(
                f"UPDATE runs SET cut_by_decision = 1 WHERE state = 'queued' AND variant IN ({marks})", dropped
            )
        conn.execute(
            "INSERT INTO events(t, run_id, kind, data) VALUES (?, NULL, 'decision', ?)",
            (
                now,
                json.dumps(
                    {"seq": seq, "who": who, "choice": choice, "variants": kept, "dropped": dropped, "note": note}
                ),
            ),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return {
        "seq": seq,
        "t": now,
        "who": str(who),
        "choice": choice,
        "variants": kept,
        "note": note,
        "dropped": dropped,
        "cut_runs": marked,
        "estimate": estimate,
    }
