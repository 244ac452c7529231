"""Metric values as numbers, whatever a training script wrote.

Scripts write integers too large for a float (a 400-digit loss), strings such as "NaN" or "-inf",
and C runtimes print `-nan(ind)` or `1.#INF`. One decoder, shared by the rules, the ledger and the
regex path, so every reader sees the same number and none of them raises (an OverflowError in one
reader killed a healthy run's supervisor).
"""

from __future__ import annotations

import math
import re
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_NONFINITE = re.compile(
    r"""^(?P<sign>[+-]?)(?:
        (?P<nan>nan(?:\(\w*\))?|1\.\#(?:ind|qnan|snan)\w*)
      | (?P<inf>inf(?:inity)?|1\.\#inf\w*)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)


def nonfinite_word(text: str) -> float | None:
    """`nan`, `-nan(ind)`, `NaN`, `inf`, `-Infinity`, `1.#INF`, `1.#QNAN` as floats; else None."""
    m = _NONFINITE.match(text.strip())
    if m is None:
        return None
    if m.group("nan"):
        return math.nan
    return -math.inf if m.group("sign") == "-" else math.inf


def metric_number(value: Any) -> float | None:
    """A metric value as a float: numbers (an integer beyond a float's range is +-inf, never an
    OverflowError) and the non-finite words; None for anything else (bools, other strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        return nonfinite_word(value)
    return None


def parse_number_text(text: str) -> float | None:
    """A number printed in a log line: `2.31`, `1e-3,`, `nan`, `-nan(ind)`, `1.#INF`; None if not."""
    raw = text.strip()
    word = nonfinite_word(raw)  # before the punctuation goes: `-nan(ind)` ends in ')'
    if word is not None:
        return word
    t = raw.rstrip(",;:)]}").lstrip("([{")
    try:
        return float(t)
    except ValueError:
        return nonfinite_word(t)


def int64_or_none(value: Any) -> int | None:
    """An integer SQLite can store (64-bit), else None: a huge step is not a step."""
    if isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX:
        return value
    return None


def finite_or_none(value: Any) -> float | None:
    """A finite float (for times and rates), else None."""
    v = metric_number(value) if not isinstance(value, str) else None
    return v if v is not None and math.isfinite(v) else None
