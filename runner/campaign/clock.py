"""The rental clock: how long the bundle has left and how loudly to say so.

Levels (README): "ok"; "warning" once the retrieval deadline is within `warn_hours`;
"critical" at or past the retrieval deadline (files must already be leaving the host);
"expired" once the window has closed; "not_open" before the window opens (`started_at` in the
future): then the times left are the window's whole length, never more, and nothing launches.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from runner.campaign.objects import Bundle

LEVELS = ("not_open", "ok", "warning", "critical", "expired")


def level_at(remaining_seconds: float, to_retrieve_seconds: float, warn_hours: float) -> str:
    """The level of an open window: the one rule the runner, the CLI and the console apply."""
    if remaining_seconds <= 0:
        return "expired"
    if to_retrieve_seconds <= 0:
        return "critical"
    if to_retrieve_seconds <= warn_hours * 3600:
        return "warning"
    return "ok"


@dataclass(frozen=True)
class ClockReading:
    level: str
    remaining_seconds: float  # until expiry (negative once expired)
    to_retrieve_seconds: float  # until the retrieval deadline (negative once past)
    expires_at: dt.datetime
    retrieve_by: dt.datetime
    opens_in_seconds: float = 0.0  # > 0 before the window opens


def read_clock(bundle: Bundle, now: float | None = None) -> ClockReading:
    """Where the window stands at `now` (epoch seconds; default the current time)."""
    now = time.time() if now is None else now
    opens = bundle.started_at.timestamp()
    if now < opens:  # counted from the opening, never more than the window holds
        return ClockReading(
            "not_open",
            bundle.expires_at.timestamp() - opens,
            bundle.retrieve_by.timestamp() - opens,
            bundle.expires_at,
            bundle.retrieve_by,
            opens - now,
        )
    remaining = bundle.expires_at.timestamp() - now
    to_retrieve = bundle.retrieve_by.timestamp() - now
    level = level_at(remaining, to_retrieve, bundle.warn_hours)
    return ClockReading(level, remaining, to_retrieve, bundle.expires_at, bundle.retrieve_by)
