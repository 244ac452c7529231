"""Turning what a run's files say into values SQLite holds: metric numbers and words, folded summaries.

Apart from the ledger's SQL because it is pure and total over any JSON a training script writes:
no value may raise (OverflowError, RecursionError) on the way into the ledger.
"""

from __future__ import annotations

import functools
import json
import math
import operator
from typing import Any, TypeGuard

from runner.campaign.numbers import INT64_MAX, INT64_MIN, metric_number


def number_text(value: Any) -> tuple[float | None, str | None]:
    """(REAL column, text column) for a metric value: non-finite floats keep their words; an
    integer too large for a float is inf (never an OverflowError), a string such as "NaN" its
    number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None, None if value is None else str(value)
    v = metric_number(value)
    if v is None:
        return None, str(value)[:200]
    if math.isfinite(v):
        return v, None
    return None, "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def text_number(value: float | None, text: str | None) -> float | None:
    """The inverse of `number_text`: 'nan'/'inf'/'-inf' become floats again."""
    if value is not None:
        return value
    if text in ("nan", "inf", "-inf"):
        return float(text)
    return None


def is_num(v: Any) -> TypeGuard[int | float]:
    return type(v) is float or (type(v) is int and INT64_MIN <= v <= INT64_MAX)


def is_int(v: Any) -> bool:
    """An integer SQLite can hold: a 400-digit step is no step (it would raise OverflowError)."""
    return type(v) is int and INT64_MIN <= v <= INT64_MAX


def _is_metric(v: Any) -> bool:
    """What the loss column takes: numbers (huge integers as inf) and "NaN"/"inf" words."""
    return (type(v) in (int, float)) or (type(v) is str and metric_number(v) is not None)


def bindable(v: Any) -> Any:
    """A value SQLite can bind, whatever a run's files said: integers beyond 64 bits become NULL
    rather than raise OverflowError, lists and tables their JSON text."""
    if v is None or type(v) in (float, str, bytes):
        return v
    if isinstance(v, str):  # a StrEnum member (RunState): its text, as the readers compare it
        return str(v)
    if type(v) is bool:
        return int(v)
    if type(v) is int:
        return v if INT64_MIN <= v <= INT64_MAX else None
    try:
        return json.dumps(v, default=str)[:2000]
    except (ValueError, RecursionError):
        return None


_NOT_NONE = functools.partial(operator.is_not, None)


def count_sum(rows: list[dict], name: str) -> int:
    """The sum of a count column (`truncated`, `samples`); lines without it, or with a value that
    is not a finite number SQLite can hold, add nothing."""
    values = list(filter(_NOT_NONE, map(operator.methodcaller("get", name), rows)))
    try:
        total = sum(values)  # C speed; a string raises, a NaN or inf shows in the total
        if type(total) is int and INT64_MIN <= total <= INT64_MAX:
            return total
        if type(total) is float and math.isfinite(total) and abs(total) < INT64_MAX:
            return int(total)
    except TypeError:
        pass
    total = sum(int(v) for v in values if is_num(v) and math.isfinite(v))
    return max(INT64_MIN, min(INT64_MAX, total))


def fold_last(rows: list[dict]) -> dict[str, tuple[Any, int | None, float | None]]:
    """name -> (last numeric value, step and t of the line it came from). Lines usually carry the
    same names, so `dict.update` does the work and only names missing from the last line are
    looked up backwards."""
    if not rows:
        return {}
    merged: dict[str, Any] = {}
    for r in rows:
        merged.update(r)
    out: dict[str, tuple[Any, int | None, float | None]] = {}
    final = rows[-1]
    missing = set()
    for name, value in merged.items():
        if name in ("t", "step"):
            continue
        if name in final:
            out[name] = (value, final.get("step"), final.get("t"))
        else:
            missing.add(name)
    for r in reversed(rows):
        if not missing:
            break
        for name in missing & r.keys():
            out[name] = (r[name], r.get("step"), r.get("t"))
        missing -= r.keys()
    return {
        k: (v, s if is_int(s) else None, t if is_num(t) and math.isfinite(t) else None)
        for k, (v, s, t) in out.items()
        if _is_metric(v)
    }
