"""The plan the pilot is judged against: frozen once when the runner first starts (ledger `meta`
key `plan_frozen`), compared with what happens, never rewritten; and the pilot phase, if declared.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from runner.campaign.objects import Campaign, Phase
from runner.ledger import pilot_rows as rows

PILOT_PHASE = "pilot"  # a phase of this name (any case) is the pilot


def frozen_plan(conn: sqlite3.Connection) -> dict[str, Any] | None:
    value = rows.meta_json(conn, rows.PLAN_KEY)
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
    data = {"committed_hours": plan.get("committed_hours"), "fits": plan.get("fits")}
    if rows.put_meta_once(conn, rows.PLAN_KEY, plan, t=plan["frozen_at"], event="plan_frozen", data=data):
        return plan
    return frozen_plan(conn) or plan


def plan_variants(campaign: Campaign, plan: dict[str, Any]) -> list[str]:
    """The variants the frozen plan runs, in plan order (every declared one if it names none)."""
    names: list[str] = []
    for item in plan.get("items", []):
        if item.get("kind") == "variant" and item.get("name") not in names:
            names.append(item["name"])
    return names or [v.name for v in campaign.variants]


def scheduled_variants(campaign: Campaign, plan: dict[str, Any], conn: sqlite3.Connection | None = None) -> list[str]:
    """What the campaign will run: the frozen plan's variants, then any variant queued by hand
    (`campaign start`) that the plan does not name."""
    names = plan_variants(campaign, plan)
    if conn is not None:
        names += [n for n in rows.run_variants(conn) if n not in names]
    return names


def pilot_phase(campaign: Campaign) -> Phase | None:
    return next((p for p in campaign.phases if p.name.strip().lower() == PILOT_PHASE), None)
