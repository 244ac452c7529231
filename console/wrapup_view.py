"""The wrap-up as the console shows it: the countdown to it, then the runs it is stopping (from the
snapshot's `runner.wrap_up`; `now` from the console's own clock so it counts between polls)."""

from __future__ import annotations

from console.fmt import fmt_span, parse_iso

SHOW_BEFORE_S = 6 * 3600  # the countdown shows this long before the wrap-up starts


def wrap_up_of(snapshot: dict) -> dict | None:
    w = (snapshot.get("runner") or {}).get("wrap_up")
    return w if isinstance(w, dict) and w.get("phase") not in (None, "none") else None


def banner_text(wrap: dict | None, now: float, retrieve_by: str | None) -> str | None:
    if not wrap:
        return None
    phase = wrap.get("phase")
    at = parse_iso(wrap.get("at"))
    deadline = parse_iso(retrieve_by or wrap.get("retrieve_by"))
    to_deadline = f"retrieval deadline in {fmt_span(deadline.timestamp() - now)}" if deadline else ""
    if phase == "scheduled" and at is not None:
        left = at.timestamp() - now
        if left > SHOW_BEFORE_S:
            return None
        return (
            f"WRAP-UP in {fmt_span(max(left, 0.0))}: then nothing new launches, running runs checkpoint and stop "
            "(w: move or cancel)"
        )
    runs = wrap.get("runs") or {}
    stopped = sum(1 for how in runs.values() if how != "checkpointing")
    if phase == "running":
        return (
            f"WRAP-UP: {stopped}/{len(runs)} runs stopped at verified checkpoints; no new launches; {to_deadline} (w)"
        )
    if phase == "writing":
        return f"WRAP-UP: runs stopped; verifying and writing the manifest — {to_deadline}"
    if phase == "done":
        return f"WRAP-UP DONE: {len(runs)} runs stopped at verified checkpoints, manifest written — pull now (f)"
    return None
