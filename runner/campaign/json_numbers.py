"""Numbers in the JSON the `campaign` command prints for scripts: every number a JSON number.

JSON has no NaN or infinity. A value that is not finite is written as `null`, with a sibling key
`<key>_nonfinite` saying which it was ("nan", "inf" or "-inf"), so a script never meets a string
where it expects a number and never loses the fact that a loss diverged. The runner's socket
carries non-finite floats as the strings "nan", "inf", "-inf" (docs/INTERNALS.md); `json_ready`
turns those into the same null-and-flag form.
"""

from __future__ import annotations

import math
from typing import Any

FLAG_SUFFIX = "_nonfinite"
# the socket's words for a non-finite number (and JSON5's spellings), each to the flag's word
WORDS = {"nan": "nan", "inf": "inf", "-inf": "-inf", "NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}
_NO_WORDS: dict[str, str] = {}


def as_number(value: Any) -> float | int | None:
    """A number recorded as text (the ledger's `stop_value`) as a number; None when it is none."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() and "." not in str(value) else number


def _nonfinite_word(value: Any, texts: bool) -> str | None:
    if type(value) is float and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if texts and isinstance(value, str):
        return WORDS.get(value)
    return None


def nonfinite_word(value: Any) -> str | None:
    """ "nan", "inf" or "-inf" when `value` is a non-finite float or the socket's word for one."""
    return _nonfinite_word(value, True)


def nonfinite_as_text(obj: Any) -> Any:
    """A copy of `obj` where every non-finite float is the string "nan", "inf" or "-inf": the
    socket's and the report's strict JSON (no NaN tokens), as docs/INTERNALS.md describes."""
    word = _nonfinite_word(obj, False)
    if word is not None:
        return word
    if isinstance(obj, dict):
        return {k: nonfinite_as_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nonfinite_as_text(v) for v in obj]
    return obj


def json_ready(obj: Any, *, texts: bool = False) -> Any:
    """A copy of `obj` with every non-finite float as null plus its `<key>_nonfinite` flag.
    `texts`: also read the socket's "nan"/"inf"/"-inf" strings as the numbers they stand for.
    Scalars are judged inline, without a call each: a snapshot of 10,000 runs holds ~500,000, and
    `x - x != 0.0` is true exactly for NaN and the infinities."""
    words = WORDS if texts else _NO_WORDS
    t = type(obj)
    if t is dict:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            vt = type(value)
            if vt is dict or vt is list or vt is tuple:
                out[key] = json_ready(value, texts=texts)
            elif vt is float and value - value != 0.0:
                out[key] = None
                out[f"{key}{FLAG_SUFFIX}"] = "nan" if value != value else ("inf" if value > 0 else "-inf")
            elif vt is str and value in words:
                out[key] = None
                out[f"{key}{FLAG_SUFFIX}"] = words[value]
            else:
                out[key] = value
        return out
    if t is list or t is tuple:
        items = []
        for v in obj:
            vt = type(v)
            if vt is dict or vt is list or vt is tuple:
                items.append(json_ready(v, texts=texts))
            elif (vt is float and v - v != 0.0) or (vt is str and v in words):
                items.append(None)
            else:
                items.append(v)
        return items
    if isinstance(obj, (dict, list, tuple)):  # subclasses: the general path
        return json_ready(dict(obj) if isinstance(obj, dict) else list(obj), texts=texts)
    return obj
