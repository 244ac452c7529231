"""The rental clock as the console sees it: the bundle's times from the snapshot, `now` from the
console's own (injectable) clock, so the header counts down between polls and tests and
screenshots can stand at any moment. The levels and their rule are `runner.campaign.clock`'s."""

from __future__ import annotations

from dataclasses import dataclass

from console.fmt import parse_iso
from runner.campaign.clock import LEVELS, level_at

__all__ = ["LEVELS", "Expiry", "expiry_at"]
DEFAULT_WARN_HOURS = 12.0


@dataclass(frozen=True)
class Expiry:
    level: str
    remaining_seconds: float | None  # to the end of the window
    to_retrieve_seconds: float | None  # to the retrieval deadline


def expiry_at(bundle: dict, now: float, warn_hours: float | None = None) -> Expiry:
    expires = parse_iso(bundle.get("expires_at"))
    retrieve = parse_iso(bundle.get("retrieve_by"))
    if expires is None:
        return Expiry(str(bundle.get("warning") or "ok"), None, None)
    warn = warn_hours if warn_hours is not None else float(bundle.get("warn_hours") or DEFAULT_WARN_HOURS)
    opens = parse_iso(bundle.get("started_at"))
    if opens is not None and now < opens.timestamp():  # the window's whole length, never more
        now = opens.timestamp()
        level_before = "not_open"
    else:
        level_before = None
    remaining = expires.timestamp() - now
    to_retrieve = (retrieve.timestamp() if retrieve else expires.timestamp()) - now
    if level_before is not None:
        return Expiry(level_before, remaining, to_retrieve)
    return Expiry(level_at(remaining, to_retrieve, warn), remaining, to_retrieve)
