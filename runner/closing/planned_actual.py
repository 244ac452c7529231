"""The report's planned-against-actual rows: per item of the frozen plan, the hours and why they differ.

Apart from the report's rendering because it is its own reckoning over runs, cuts and attempts.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any

from runner.campaign.objects import Campaign
from runner.closing.deliverables import RunRecord, Verification, describe_end
from runner.closing.pilot import attempt_started_at
from runner.ledger.states import RunState


def when_utc(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def current_attempts(conn: sqlite3.Connection | None, verification: Verification, now: float) -> dict[str, float]:
    """Seconds of the attempt still going, per running run (the ledger sums only ended ones)."""
    out: dict[str, float] = {}
    if conn is None:
        return out
    for c in verification.checks:
        if c.run.state != RunState.RUNNING:
            continue
        since = attempt_started_at(conn, c.run)
        if since:
            out[c.run.id] = max(now - since, 0.0)
    return out


def planned_vs_actual(
    campaign: Campaign,
    plan: dict[str, Any],
    verification: Verification,
    decisions: list[dict[str, Any]],
    elapsed: dict[str, float],
) -> list[dict[str, Any]]:
    """One row per item of the frozen plan, with the actual hours and why they differ."""
    runs_by_variant: dict[str, list[RunRecord]] = {}
    for c in verification.checks:
        runs_by_variant.setdefault(c.run.variant, []).append(c.run)
    cut_at = _cut_decisions(campaign, decisions)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in plan.get("items", []):
        name = item.get("name")
        planned = round(float(item.get("end_hours", 0.0)) - float(item.get("start_hours", 0.0)), 4)
        if item.get("kind") == "variant":
            seen.add(name)
            rows.append(
                _variant_row(name, planned, runs_by_variant.get(name, []), cut_at.get(name), elapsed, verification)
            )
        elif not _runs_variants(campaign, name):
            note = (
                "human preparation before the window: not counted against it"
                if item.get("before_window")
                else "not measured by the runner (work outside its runs)"
            )
            rows.append(
                {
                    "name": name,
                    "kind": "phase",
                    "planned_hours": planned,
                    "actual_hours": None,
                    "difference_hours": None,
                    "note": note,
                }
            )
    for name, runs in runs_by_variant.items():
        if name not in seen:
            planned = runs[0].planned_hours
            row = _variant_row(name, planned, runs, cut_at.get(name), elapsed, verification)
            row["note"] = "not in the frozen plan; " + row["note"]
            rows.append(row)
    rows.append(
        {
            "name": "retrieval before expiry",
            "kind": "retrieval",
            "planned_hours": campaign.bundle.retrieval_hours,
            "actual_hours": None,
            "difference_hours": None,
            "note": f"files off the host by {campaign.bundle.retrieve_by:%Y-%m-%d %H:%M} UTC",
        }
    )
    return rows


def _variant_row(
    name: str,
    planned: float,
    runs: list[RunRecord],
    cut: dict | None,
    elapsed: dict[str, float],
    verification: Verification,
) -> dict[str, Any]:
    actual = None
    if runs:
        actual = round(sum(r.active_seconds + elapsed.get(r.id, 0.0) for r in runs) / 3600.0, 4)
    diff = None if actual is None else round(actual - planned, 4)
    notes = []
    for r in runs:
        check = verification.check(r.id)
        if r.state == RunState.FINISHED:
            if check and check.approved:
                notes.append(
                    f"{r.id} finished, approved"
                    + (f" (re-run of {check.duplicate_of}, counted once)" if check.duplicate_of else "")
                )
            else:
                notes.append(f"{r.id} finished, not approved: " + "; ".join(check.problems if check else []))
        elif r.state == RunState.STOPPED:
            notes.append(f"{r.id} {describe_end(r)}")
        elif r.state == RunState.REFUSED:
            notes.append(f"{r.id} refused near expiry" + (f": {r.stop_reason}" if r.stop_reason else ""))
        elif r.cut_by_decision:
            notes.append(
                f"{r.id} cut at the pilot decision"
                + (f" ({when_utc(cut['t'])}, {cut['who']})" if cut is not None else "")
            )
        else:
            notes.append(f"{r.id} {describe_end(r)}")
        if r.attempts > 1:
            notes[-1] += f" after {r.attempts} attempts"
    if cut is not None and not any(r.state in (RunState.FINISHED, RunState.RUNNING) or r.cut_by_decision for r in runs):
        notes.append(f"cut at the pilot decision ({when_utc(cut['t'])}, {cut['who']})")
    if not runs and cut is None:
        notes.append("not run")
    return {
        "name": name,
        "kind": "variant",
        "planned_hours": planned,
        "actual_hours": actual,
        "difference_hours": diff,
        "note": "; ".join(notes),
    }


def _cut_decisions(campaign: Campaign, decisions: list[dict[str, Any]]) -> dict[str, dict]:
    """variant -> the decision that cut it: what each cut dropped from the queue (a cut recorded
    before the ledger kept `dropped`: every variant it did not keep)."""
    out: dict[str, dict] = {}
    for d in (d for d in decisions if d["choice"] == "cut"):
        names = d.get("dropped")
        if not names and d.get("how") is None:
            names = [v.name for v in campaign.variants if v.name not in set(d["variants"])]
        for name in names or []:
            out[name] = d
    return out


def _runs_variants(campaign: Campaign, phase_name: str | None) -> bool:
    return any(p.name == phase_name and p.variants for p in campaign.phases)
