"""The status snapshot as `campaign status --json` prints it: every number a JSON number.

The runner's socket carries a non-finite number as the string "nan", "inf" or "-inf"; scripts get
`null` plus a `<key>_nonfinite` flag (`json_ready`). Walking every value of every run for that
cost more than the rest of `status --json` together at 10,000 runs (~500,000 values). A run row
can hold such a word only in its numeric fields (`Num` and `Any` in `RunRow`, the values of
`metrics`, each rule's `value`), so only those are looked at, and a row without one is passed on
as it is. Text fields are never read as numbers: a variant named "inf" stays "inf".
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from runner.campaign.json_numbers import FLAG_SUFFIX, WORDS, json_ready, nonfinite_word
from runner.daemon.status_types import Num, RunRow

# the run row's fields that may carry a non-finite number: finite-or-text (`Num`), `Any`, and
# plain floats (a snapshot read offline); metrics and rules are looked at below
NUMBER_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in msgspec.structs.fields(RunRow)
    if f.type == Num or f.type is Any or f.type is float or float in typing.get_args(f.type)
)
_NUMBER_KEYS = frozenset(NUMBER_FIELDS)


def _row_has_word(row: dict[str, Any]) -> bool:
    for key in NUMBER_FIELDS:  # inline: this runs for every field of every row
        v = row.get(key)
        if (type(v) is str and v in WORDS) or (type(v) is float and v - v != 0.0):
            return True
    metrics = row.get("metrics")
    if type(metrics) is dict and any(nonfinite_word(v) is not None for v in metrics.values()):
        return True
    rules = row.get("rules")
    return type(rules) is list and any(type(r) is dict and nonfinite_word(r.get("value")) for r in rules)


def _flagged(obj: dict[str, Any], keys: tuple[str, ...] | frozenset[str]) -> dict[str, Any]:
    """A copy of `obj` with each of `keys` that holds a non-finite number as null plus its flag."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        word = nonfinite_word(value) if key in keys else None
        if word is None:
            out[key] = value
        else:
            out[key] = None
            out[f"{key}{FLAG_SUFFIX}"] = word
    return out


def run_row_ready(row: dict[str, Any]) -> dict[str, Any]:
    """One decoded run row with its non-finite numbers as null plus flag (the row itself when it
    has none: most rows, and every one of a campaign whose losses never diverged)."""
    if not _row_has_word(row):
        return row
    out = _flagged(row, _NUMBER_KEYS)
    if type(row.get("metrics")) is dict:
        out["metrics"] = _flagged(row["metrics"], frozenset(row["metrics"]))
    if type(row.get("rules")) is list:
        out["rules"] = [_flagged(r, ("value",)) if type(r) is dict else r for r in row["rules"]]
    return out


def status_ready(snap: dict[str, Any]) -> dict[str, Any]:
    """A decoded snapshot (from the runner, or read offline) as `status --json` prints it: the
    runs row by row as above, the campaign-wide parts (small) through `json_ready`, in order."""
    runs = snap.get("runs")
    rest = json_ready({k: v for k, v in snap.items() if k != "runs"}, texts=True)
    out: dict[str, Any] = {}
    for key in snap:
        if key == "runs":
            out[key] = [run_row_ready(r) if type(r) is dict else r for r in runs] if type(runs) is list else runs
            continue
        out[key] = rest[key]
        if f"{key}{FLAG_SUFFIX}" in rest:
            out[f"{key}{FLAG_SUFFIX}"] = rest[f"{key}{FLAG_SUFFIX}"]
    return out
