"""Small formatters for table cells and headers: sizes, hours, losses, countdowns.

Kept apart from the widgets so every widget formats the same value the same way, and so the
formatting is tested without a screen.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from runner.campaign.durations import format_duration
from runner.campaign.durations import format_span as fmt_span

__all__ = [
    "format_duration",
    "fmt_span",
    "fmt_bytes",
    "fmt_hours",
    "fmt_loss",
    "fmt_iso_local",
    "as_float",
    "parse_iso",
]


def as_float(value: Any) -> float | None:
    """A snapshot number (non-finite floats travel as the strings "nan", "inf", "-inf")."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "N/A"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_hours(h: float | None) -> str:
    if h is None:
        return "-"
    return f"{h:.1f}" if h < 100 else f"{h:.0f}"


def fmt_loss(value: Any) -> str:
    v = as_float(value)
    if v is None:
        return "-"
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.2e}"
    return f"{v:.4f}"


def parse_iso(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def fmt_iso_local(text: str | None, tz: dt.tzinfo | None = None, *, short: bool = False) -> str:
    """An ISO UTC time shown in the user's zone (or `tz`, fixed in tests and screenshots);
    `short` drops the date (the weekday stays: a window is at most 30 days)."""
    when = parse_iso(text)
    if when is None:
        return "-"
    local = when.astimezone(tz) if tz is not None else when.astimezone()
    return local.strftime("%a %H:%M %Z" if short else "%a %d %b %H:%M %Z").strip()
