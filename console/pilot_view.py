"""The pilot decision as the console words it: the banner line, the re-estimate the decision is
taken on, and the recorded result. Pure functions of the snapshot's `pilot` key (runner/closing/pilot.py's
`pilot_status`, see docs/INTERNALS.md) and of the `decide` op's answer, tested without a screen.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from console.fmt import as_float, fmt_span
from console.widgets.runs.cells import fmt_amount, hours_unit

SHOW_DECIDED_SECONDS = 120.0  # the banner recalls a fresh decision this long


def awaiting(pilot: dict | None) -> bool:
    return pilot is not None and pilot.get("state") == "awaiting_decision"


def hours_words(hours: float | None) -> str:
    """A span of hours with its units: "4m 24s", "1h 02m", "2d 03h"."""
    return "-" if hours is None else fmt_span(hours * 3600.0)


def fit_words(estimate: dict | None) -> Text:
    """Whether what is left fits before the retrieval deadline, and by how much."""
    if not estimate:
        return Text("no re-estimate yet", style="dim")
    if estimate.get("fits"):
        return Text(f"fits, {hours_words(as_float(estimate.get('spare_hours')))} spare", style="green")
    return Text(
        f"does NOT fit: {hours_words(as_float(estimate.get('over_hours')))} past the retrieval deadline",
        style="bold red",
    )


def decision_words(decision: dict | None) -> str:
    if not decision:
        return "no decision yet"
    choice = str(decision.get("choice"))
    kept = decision.get("variants") or []
    what = f"cut to {', '.join(kept)}" if choice == "cut" else choice
    dropped = decision.get("dropped") or []
    if dropped:
        what += f" (dropped {', '.join(dropped)})"
    ran = decision.get("already_ran") or []
    if ran:
        what += f" ({', '.join(ran)} already ran: left as is)"
    if decision.get("note"):
        what += f": {decision['note']}"
    return what


def banner_text(pilot: dict | None, now: float, tz: dt.tzinfo | None = None) -> Text | None:
    """The line under the header: a decision awaited (with the re-estimate's verdict), or a
    decision just recorded; None when neither needs saying."""
    if not pilot:
        return None
    if awaiting(pilot):
        estimate = pilot.get("estimate") or {}
        text = Text("PILOT OVER: decide — continue, cut or revisit (D) · ", style="bold")
        text.append(f"{hours_words(as_float(estimate.get('remaining_hours')))} of work left, ")
        text.append_text(fit_words(estimate))
        text.append_text(wait_words(pilot, now, tz))
        return text
    decision = pilot.get("decision")
    if pilot.get("state") == "decided" and decision and now - (as_float(decision.get("t")) or 0) < SHOW_DECIDED_SECONDS:
        return Text(f"PILOT DECIDED by {decision.get('who')}: {decision_words(decision)}")
    return None


def wait_words(pilot: dict, now: float, tz: dt.tzinfo | None = None) -> Text:
    """The hold and its end: " · launches held until 03:10 UTC (1h 02m), then the runner continues"."""
    end = as_float(pilot.get("continues_at"))
    if end is None:
        return Text("")
    left = max(end - now, 0.0)
    return Text(
        f" · launches held until {_clock(end, tz)} ({fmt_span(left)}), then the runner continues by itself",
        style="yellow",
    )


def estimate_summary(estimate: dict | None, tz: dt.tzinfo | None = None) -> Text:
    """One paragraph: work left, when it would end against the retrieval deadline, and what the
    estimate was measured from."""
    if not estimate:
        return Text("No re-estimate yet: nothing has been measured.", style="dim")
    text = Text()
    text.append(f"{hours_words(as_float(estimate.get('remaining_hours')))} of work left", style="bold")
    end, by = as_float(estimate.get("projected_end")), as_float(estimate.get("retrieve_by"))
    if end is not None and by is not None:
        text.append(f", ending {_clock(end, tz)} (retrieve by {_clock(by, tz)}): ")
    else:
        text.append(": ")
    text.append_text(fit_words(estimate))
    text.append(".\n")
    # speed_factor is measured time over planned time: 0.23 means runs take a quarter of the
    # planned hours (four times faster), so it is shown as time, never as a speed.
    bits = [
        f"measured: runs take x{as_float(estimate.get('speed_factor')) or 1:.2f} their planned time "
        f"({estimate.get('measured_runs', 0)} run(s))"
    ]
    write, verify = (
        as_float(estimate.get("checkpoint_write_seconds")),
        as_float(estimate.get("checkpoint_verify_seconds")),
    )
    if write is not None:
        bits.append(f"ckpt write {write:.1f} s")
    if verify is not None:
        bits.append(f"verify {verify:.1f} s")
    text.append("; ".join(bits), style="dim")
    return text


def estimate_table(estimate: dict | None) -> Table:
    """Each item still to run: its state, planned time, time used and time left (minutes for items
    planned under an hour). Items already done or cut have nothing left to estimate."""
    t = Table(box=None, pad_edge=False, expand=False, show_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("variant", "left"),
        ("state", "left"),
        ("plan", "right"),
        ("used", "right"),
        ("left", "right"),
    )
    for name, justify in columns:
        t.add_column(name, justify=justify, no_wrap=True)
    for item in (estimate or {}).get("items") or []:
        if item.get("state") in ("done", "cut"):
            continue
        planned = as_float(item.get("planned_hours"))
        scale, unit = hours_unit(planned)
        t.add_row(
            str(item.get("variant")),
            str(item.get("state")),
            f"{fmt_amount(planned, scale)}{unit}",
            f"{fmt_amount(as_float(item.get('elapsed_hours')), scale)}{unit}",
            f"{fmt_amount(as_float(item.get('remaining_hours')), scale)}{unit}",
        )
    return t


def cut_candidates(pilot: dict | None, variants: list[dict]) -> list[tuple[str, str, bool]]:
    """(label, variant, kept by default) for the cut checkboxes: the declared variants in plan
    order; the essential ones are kept by default (the control, what the conclusion needs)."""
    order = [str(i.get("variant")) for i in ((pilot or {}).get("estimate") or {}).get("items") or []]
    cats = {str(v.get("name")): str(v.get("category") or "") for v in variants}
    for item in ((pilot or {}).get("estimate") or {}).get("items") or []:
        cats.setdefault(str(item.get("variant")), str(item.get("category") or ""))
    names = order + [n for n in cats if n not in order]
    return [(f"{n}  ({cats.get(n) or '?'})", n, cats.get(n) == "essential") for n in names]


def who() -> str:
    """Who decides, as the ledger records it."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "someone"
    return f"{user}@{socket.gethostname()} (console)"


def _clock(t: float, tz: dt.tzinfo | None) -> str:
    when = dt.datetime.fromtimestamp(t, dt.UTC)
    return (when.astimezone(tz) if tz is not None else when.astimezone()).strftime("%H:%M %Z").strip()
