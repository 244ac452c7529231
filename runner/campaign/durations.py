"""Durations as users write them in campaign files: "90s", "30m", "2h", "1h30m", "1.5h"."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_SECONDS = 10 * 366 * 86400.0


def parse_duration(text: object) -> float:
    """Seconds in `text`; raises ValueError with a readable reason when it does not parse (or is not
    a string: a campaign file can hold any TOML value there)."""
    if not isinstance(text, str):
        raise ValueError(f'expected a duration such as "30m", got {text!r}')
    s = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f'cannot read duration {text!r}: use a number and a unit, e.g. "90s", "30m", "2h"')
    if total <= 0:
        raise ValueError(f"duration {text!r} must be more than zero")
    if not total <= MAX_SECONDS:  # also catches inf: a 400-digit number of hours
        raise ValueError(f"duration {text[:40]!r} is longer than ten years: write it in a unit that fits")
    return total


def format_duration(seconds: float | None) -> str:
    """Compact human form: 1d 02:03:04, 2:03:04, 3:04 ("-" for None); negative shows a minus."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{sign}{d}d {h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{sign}{h}:{m:02d}:{s:02d}"
    return f"{sign}{m}:{s:02d}"


def format_span(seconds: float | None) -> str:
    """A span with its units, for what a tired person must not misread ("22:00": 22 minutes or
    22 hours?): "45s", "22m 05s", "3h 12m", "2d 03h"."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{sign}{d}d {h:02d}h"
    if h:
        return f"{sign}{h}h {m:02d}m"
    if m:
        return f"{sign}{m}m {sec:02d}s"
    return f"{sign}{sec}s"


def duration_words(seconds: float) -> str:
    """A duration as a sentence says it, in its largest exact units: "10 s", "30 min", "2 h",
    "1 h 30 min", "1 d 6 h" (a fraction of a second is kept: "0.5 s")."""
    if seconds < 60:
        return f"{seconds:g} s"
    s = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        n, s = divmod(s, size)
        if n:
            parts.append(f"{n} {unit}")
    return " ".join(parts)


def parse_when(text: str, now: float) -> float:
    """A moment as a person types it: "now", "+20m" (from now), or a date and time with a zone
    (2026-11-29T08:30:00Z). Raises ValueError saying what is accepted."""
    import datetime as dt

    text = text.strip()
    if text == "now":
        return now
    if text.startswith("+"):
        return now + parse_duration(text[1:])
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r}: expected now, +DURATION (e.g. +20m) or a time with a zone (2026-11-29T08:30:00Z)"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r}: give a time zone (e.g. a trailing Z for UTC)")
    return when.timestamp()
