"""The pilot decision point: when the pilot is over, re-estimate what is left, hold the queue and
ask for a decision.

The pilot is over when every variant the campaign will run has what the basis requires:
- with a phase named `pilot`: every variant of that phase ended (a `pilot` phase without variants
  ends when its planned hours have passed); until then only the pilot phase's variants launch;
- without one: the first run of every variant the plan runs (and of any variant started by hand)
  reached its first checkpoint, or ended before one.
Then nothing further launches until a decision is recorded: continue, cut to chosen variants, or
revisit the question, from the console or `campaign decide`. After `[pilot] wait` (default 2 h)
without one, the runner continues by itself and records "no decision within 2 h: continued".

The runner (daemon) calls `launch_hold`, `pilot_status` and `record_decision` with its own writable
connection; the SQL lives in runner.ledger.pilot_rows.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from runner.campaign.durations import duration_words
from runner.campaign.errors import CampaignError
from runner.campaign.objects import Campaign
from runner.closing.pilot_estimate import attempt_started_at, re_estimate
from runner.closing.pilot_plan import (
    ensure_frozen_plan,
    frozen_plan,
    pilot_phase,
    plan_snapshot,
    plan_variants,
    scheduled_variants,
)
from runner.ledger import pilot_rows as rows
from runner.ledger.pilot_rows import DecidedHow
from runner.ledger.queries import events_of
from runner.ledger.records import RunRecord
from runner.ledger.states import TERMINAL_STATES
from runner.ledger.store import all_runs

CHOICES = ("continue", "cut", "revisit")
RUNNER_WHO = "runner"

__all__ = [
    "CHOICES",
    "DecidedHow",
    "LaunchHold",
    "attempt_started_at",
    "ensure_frozen_plan",
    "frozen_plan",
    "launch_hold",
    "list_decisions",
    "pilot_status",
    "plan_snapshot",
    "re_estimate",
    "record_decision",
    "scheduled_variants",
]


@dataclass(frozen=True)
class PilotEnd:
    complete: bool
    at: float | None
    basis: str
    noticed_at: float | None = None  # when the runner saw it (and said so): the wait starts then

    def wait_from(self, now: float) -> float:
        """When the wait for a decision starts: the pilot's end, or later when the runner was down
        then and learnt of it (and could first tell anyone) only when it came back."""
        return max(self.at or now, self.noticed_at or 0.0)


@dataclass(frozen=True)
class LaunchHold:
    """What the pilot lets the runner launch now.

    held: nothing outside `allowed` launches; allowed: the variants that still may (the pilot
    phase's, while it runs); continues_at: when the wait for a decision ends; wait_ended: the
    wait is over with no decision (the runner records "continued" and launches again)."""

    held: bool
    reason: str = ""
    allowed: frozenset[str] = frozenset()
    continues_at: float | None = None
    wait_ended: bool = False


OPEN = LaunchHold(held=False)


# ---------------------------------------------------------------------------------------------
# The pilot's end


def pilot_end(campaign: Campaign, conn: sqlite3.Connection, now: float) -> PilotEnd:
    """Whether the pilot is over (noted once in the ledger, then read from there)."""
    noted = rows.meta_json(conn, rows.PILOT_END_KEY)
    if isinstance(noted, dict):
        return PilotEnd(True, noted.get("at"), str(noted.get("basis") or ""), noted.get("noticed_at"))
    plan = ensure_frozen_plan(campaign, conn, now)
    runs = all_runs(conn)
    progress = _variant_progress(scheduled_variants(campaign, plan, conn), runs, rows.first_checkpoint_times(conn))
    end = _completion(campaign, plan, runs, progress, now)
    if end.complete:
        data = {"basis": end.basis}
        noted_now = rows.put_meta_once(
            conn,
            rows.PILOT_END_KEY,
            {"at": end.at, "basis": end.basis, "noticed_at": now},
            t=end.at or now,
            event="pilot_complete",
            data=data,
        )
        if noted_now:
            return PilotEnd(True, end.at, end.basis, now)
    return end


def _variant_progress(scope: list[str], runs: list[RunRecord], first_ckpt: dict[str, float]) -> list[dict]:
    """For each scheduled variant: its first run, and whether (and when) it reached the pilot mark."""
    out = []
    for name in scope:
        launched = [r for r in runs if r.variant == name and r.launched_at is not None]
        entry: dict[str, Any] = {"variant": name, "run": None, "reached": False, "how": None, "at": None}
        if launched:
            first = min(launched, key=lambda r: r.launched_at or 0.0)
            entry["run"] = first.id
            if first.id in first_ckpt:
                entry.update(reached=True, how="checkpoint", at=first_ckpt[first.id])
            elif first.state in TERMINAL_STATES:
                entry.update(reached=True, how=f"ended ({first.state})", at=first.ended_at or first.launched_at)
        out.append(entry)
    return out


def _completion(campaign: Campaign, plan: dict, runs: list[RunRecord], progress: list[dict], now: float) -> PilotEnd:
    pilot = pilot_phase(campaign)
    if pilot is not None:
        basis = f"the phase '{pilot.name}' ended"
        if pilot.variants:
            ends = []
            for name in pilot.variants:
                mine = [r for r in runs if r.variant == name]
                if not mine or any(r.state not in TERMINAL_STATES for r in mine):
                    return PilotEnd(False, None, basis)
                ends.append(max(r.ended_at or 0.0 for r in mine))
            return PilotEnd(True, max(ends), basis)
        item = next(
            (i for i in plan.get("items", []) if i.get("kind") == "phase" and i.get("name") == pilot.name), None
        )
        end = campaign.bundle.started_at.timestamp() + 3600.0 * float(item["end_hours"]) if item else None
        done = end is not None and now >= end
        return PilotEnd(done, end if done else None, basis)
    basis = "the first run of every variant reached its first checkpoint (or ended)"
    if progress and all(p["reached"] for p in progress):
        return PilotEnd(True, max((p["at"] or 0.0) for p in progress), basis)
    return PilotEnd(False, None, basis)


# ---------------------------------------------------------------------------------------------
# The hold on launches


def launch_hold(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> LaunchHold:
    """What may launch now. Cheap once decided (one query); called by the runner before launches."""
    if rows.has_decision(conn):
        return OPEN
    now = time.time() if now is None else now
    end = pilot_end(campaign, conn, now)
    if not end.complete:
        pilot = pilot_phase(campaign)
        if pilot is None or not pilot.variants:
            return OPEN
        return LaunchHold(
            held=True,
            reason=f"waits for the pilot: the phase '{pilot.name}' runs first, then the pilot decision",
            allowed=frozenset(pilot.variants),
        )
    continues_at = end.wait_from(now) + campaign.pilot.wait_s
    if now >= continues_at:
        return LaunchHold(held=True, reason="", continues_at=continues_at, wait_ended=True)
    return LaunchHold(
        held=True,
        reason=(
            "held for the pilot decision (`campaign decide` or the console's D); the runner "
            f"continues by itself {duration_words(campaign.pilot.wait_s)} after the pilot's end"
        ),
        continues_at=continues_at,
    )


def continue_after_wait(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> dict[str, Any]:
    """The wait ran out with no decision: record "no decision within ...: continued"."""
    note = f"no decision within {duration_words(campaign.pilot.wait_s)}: continued"
    return record_decision(conn, campaign, "continue", [], note, RUNNER_WHO, now=now, how=DecidedHow.WAIT_ENDED)


# ---------------------------------------------------------------------------------------------
# Pilot status


def pilot_status(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> dict[str, Any] | None:
    """Where the pilot stands; None until the first run was launched (nothing measured yet).

    state: "running" (pilot not over), "awaiting_decision", or "decided" (a decision is recorded)."""
    now = time.time() if now is None else now
    plan = ensure_frozen_plan(campaign, conn, now)
    runs = all_runs(conn)
    if not any(r.launched_at is not None for r in runs):
        return None
    scope = scheduled_variants(campaign, plan, conn)
    progress = _variant_progress(scope, runs, rows.first_checkpoint_times(conn))
    end = pilot_end(campaign, conn, now)
    decisions = list_decisions(conn)
    state = "decided" if decisions else ("awaiting_decision" if end.complete else "running")
    continues_at = end.wait_from(now) + campaign.pilot.wait_s if end.complete and not decisions else None
    return {
        "state": state,
        "complete": end.complete,
        "completed_at": end.at,
        "basis": end.basis,
        "plan_frozen_at": plan.get("frozen_at"),
        "variants": progress,
        "estimate": re_estimate(campaign, conn, plan, now=now, cut=cut_variants(conn)),
        "decision": decisions[-1] if decisions else None,
        "choices": list(CHOICES),
        "question": campaign.question,
        "wait_seconds": campaign.pilot.wait_s,
        "continues_at": continues_at,
        "launches_held": state == "awaiting_decision",
    }


def not_over_yet(campaign: Campaign, conn: sqlite3.Connection, now: float | None = None) -> str | None:
    """Why a decision cannot be taken yet (the pilot is not over), or None once it is.

    The decision is taken on the pilot's measurements, as the console's D offers it: one taken
    before would let the next phase launch while the pilot still runs."""
    now = time.time() if now is None else now
    end = pilot_end(campaign, conn, now)
    if end.complete:
        return None
    runs = all_runs(conn)
    pilot = pilot_phase(campaign)
    if pilot is not None and pilot.variants:
        left = []
        for name in pilot.variants:
            mine = [r for r in runs if r.variant == name and r.state not in TERMINAL_STATES]
            states = [str(r.state) for r in mine] or ([] if any(r.variant == name for r in runs) else ["not run"])
            if states:
                left.append(f"{name} ({', '.join(states)})")
        waits = f"; waiting for {', '.join(left)}" if left else ""
        return f"the pilot is not over: {end.basis.replace('ended', 'ends')} when its variants have ended{waits}"
    if pilot is not None:
        return f"the pilot is not over: the phase '{pilot.name}' ends when its planned hours have passed"
    plan = ensure_frozen_plan(campaign, conn, now)
    progress = _variant_progress(scheduled_variants(campaign, plan, conn), runs, rows.first_checkpoint_times(conn))
    left = [p["variant"] + ("" if p["run"] else " (not run)") for p in progress if not p["reached"]]
    return f"the pilot is not over: {end.basis}; waiting for {', '.join(left)}"


# ---------------------------------------------------------------------------------------------
# Decisions


def list_decisions(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [d.to_json() for d in rows.decisions(conn)]


def all_decisions(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every decision the report and the manifest name, oldest first: the pilot's, and the wrap-up
    the rental clock took (and its moves and cancels, by whom), which are ledger events."""
    out = list_decisions(conn)
    for ev in events_of(conn, ("decision", "wrap_up_moved", "wrap_up_cancelled")):
        base = {"t": ev["t"], "how": None, "variants": [], "dropped": [], "estimate": None}
        if ev["kind"] == "decision" and ev.get("seq") is None:  # the rental clock's wrap-up
            out.append(base | {"who": str(ev.get("who") or "rental clock"), "choice": str(ev.get("choice"))})
            out[-1]["note"] = ev.get("note")
        elif ev["kind"] == "wrap_up_moved":
            at = ev.get("at")
            when = _utc(float(at)) if isinstance(at, (int, float)) else "?"
            out.append(base | {"who": str(ev.get("by") or "user"), "choice": "wrap-up moved", "note": f"to {when}"})
        elif ev["kind"] == "wrap_up_cancelled":
            out.append(base | {"who": str(ev.get("by") or "user"), "choice": "wrap-up cancelled", "note": None})
    return sorted(out, key=lambda d: d["t"])


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def cut_variants(conn: sqlite3.Connection) -> set[str]:
    """Every variant a cut took out of the queue."""
    return {name for d in rows.decisions(conn) if d.choice == "cut" for name in d.dropped}


def record_decision(
    conn: sqlite3.Connection,
    campaign: Campaign,
    choice: str,
    variants: list[str] | None,
    note: str | None,
    who: str,
    now: float | None = None,
    how: DecidedHow | str = DecidedHow.CONSOLE,
) -> dict[str, Any]:
    """Record the decision with the re-estimate it was taken on; mark the queued runs it cuts.

    `cut` keeps `variants` (declared names, at least one) and drops only what has not run: the
    variants the campaign would still launch, not kept (`dropped`); a variant not kept that has
    already run is left as it is (`already_ran`). Bad input raises CampaignError."""
    now = time.time() if now is None else now
    choice = (choice or "").strip().lower()
    if choice not in CHOICES:
        raise CampaignError(f"choice must be one of {', '.join(CHOICES)}, got {choice!r}", field="choice")
    if not who or not str(who).strip():
        raise CampaignError("say who decides (user@host, or 'console')", field="who")
    how = DecidedHow(how)
    declared = [v.name for v in campaign.variants]
    kept = list(dict.fromkeys(variants or []))
    if choice == "cut":
        unknown = [n for n in kept if n not in declared]
        if unknown:
            raise CampaignError(
                f"not declared in the campaign file: {', '.join(unknown)} (declared: {', '.join(declared)})",
                file=campaign.path,
                field="variants",
            )
        if not kept:
            raise CampaignError("a cut keeps at least one variant: name the ones to keep", field="variants")
    else:
        kept = []
    plan = ensure_frozen_plan(campaign, conn, now)
    ran = rows.run_variants(conn)
    would_run = [*plan_variants(campaign, plan), *(n for n in ran if n not in plan_variants(campaign, plan))]
    dropped = [n for n in would_run if n not in kept and not ran.get(n)] if choice == "cut" else []
    already_ran = [n for n in would_run if n not in kept and ran.get(n)] if choice == "cut" else []
    estimate = re_estimate(campaign, conn, plan, now=now, cut=cut_variants(conn) | set(dropped))
    seq, marked = rows.insert_decision(
        conn,
        t=now,
        who=str(who),
        how=how.value,
        choice=choice,
        kept=kept,
        dropped=dropped,
        note=note,
        estimate=estimate,
    )
    return {
        "seq": seq,
        "t": now,
        "who": str(who),
        "how": how.value,
        "choice": choice,
        "variants": kept,
        "note": note,
        "dropped": dropped,
        "already_ran": already_ran,
        "cut_runs": marked,
        "estimate": estimate,
    }
