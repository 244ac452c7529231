"""Generators of hostile input shared by the property tests (Hypothesis) and the fuzz script
(tests/bench/fuzz_inputs.py): campaign files with one field replaced by an odd value, and metric
lines such as training scripts write them at their worst."""

from __future__ import annotations

import json
import random
from typing import Any

import tomli_w

BASE: dict[str, Any] = {
    "campaign": {"name": "fuzz", "question": "q"},
    "bundle": {"gpu": "RTX 4090", "days": 3, "started_at": "2026-11-29T09:00:00Z"},
    "phase": [{"name": "main", "variants": ["a", "b"]}],
    "variant": [
        {"name": "a", "category": "essential", "command": ["python", "t.py"], "hours": 2, "checkpoint_every": "30m"},
        {"name": "b", "category": "useful", "command": ["python", "t.py", "--x"], "hours": 1, "env": {"K": "v"}},
    ],
    "rule": [
        {"kind": "nonfinite"},
        {"kind": "stalled", "within": "15m"},
        {"kind": "below", "metric": "acc", "threshold": 0.1},
    ],
}

# (path into BASE, what the field usually holds)
FIELDS = [
    ("campaign.name", "str"),
    ("campaign.output_dir", "str"),
    ("bundle.gpu", "str"),
    ("bundle.days", "int"),
    ("bundle.started_at", "str"),
    ("bundle.price_usd", "num"),
    ("bundle.gpus", "int"),
    ("bundle.retrieval_hours", "num"),
    ("bundle.warn_hours", "num"),
    ("phase.0.hours", "num"),
    ("phase.0.variants", "list"),
    ("variant.0.name", "str"),
    ("variant.0.command", "list"),
    ("variant.0.hours", "num"),
    ("variant.0.gpus", "int"),
    ("variant.0.checkpoint_every", "str"),
    ("variant.0.metrics_regex", "str"),
    ("variant.0.checkpoint_glob", "str"),
    ("variant.1.env", "table"),
    ("variant.1.resume_command", "list"),
    ("rule.2.threshold", "num"),
    ("rule.2.after_step", "int"),
    ("rule.1.within", "str"),
]

ODD_STRINGS = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "x" * 300,
    "../..",
    "/abs",
    "é",
    "\u202e",
    "1e308h",
    "9" * 400 + "h",
    "-1h",
    "nan",
    "inf",
    "(?P<",
    "(?P<loss>\\S+)",
    "[",
    "{",
    "*" * 50,
    "A=B",
    "9999-12-31T23:00:00Z",
    "0001-01-01T00:00:00Z",
    "2026-11-29T09:00:00",
    "30m",
    "1h30m",
]
ODD_NUMBERS: list[Any] = [
    0,
    -1,
    1,
    2**63 - 1,
    2**63,
    -(2**63),
    1e308,
    -1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    1e-300,
    0.5,
    87840,
    87841,
]


def odd_value(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(ODD_STRINGS)
    if kind < 0.6:
        return rng.choice(ODD_NUMBERS)
    if kind < 0.7:
        return rng.choice([True, False])
    if kind < 0.8:
        return [odd_value(rng) for _ in range(rng.randint(0, 3))]
    if kind < 0.9:
        return {rng.choice(["A", "A=B", "", "k\x00", "PATH"]): rng.choice(["v", "\x00", ""])}
    depth = rng.choice([2, 50, 300, 5000])
    value: Any = 1
    for _ in range(min(depth, 300)):
        value = [value]
    return value


def _set(doc: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node: Any = doc
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    node[parts[-1]] = value


def campaign_text(rng: random.Random, mutations: int | None = None) -> str:
    """A campaign file: the base with 1-3 fields replaced by odd values (TOML that tomli_w can
    write), or the base text with bytes spliced in (TOML that may not parse at all)."""
    doc = json.loads(json.dumps(BASE))
    for _ in range(mutations if mutations is not None else rng.randint(1, 3)):
        path, _kind = rng.choice(FIELDS)
        _set(doc, path, odd_value(rng))
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError, RecursionError):
        text = tomli_w.dumps(BASE)
    if rng.random() < 0.2:
        at = rng.randrange(len(text))
        text = text[:at] + rng.choice(["[" * 5000, "\x00", "=", '"', "\n[[variant]]\n", "]]", "\\u0000"]) + text[at:]
    return text


def metric_line(rng: random.Random, step: int) -> bytes:
    """One line of metrics.jsonl as a script might write it at its worst."""
    kind = rng.random()
    if kind < 0.5:
        return json.dumps({"t": 1.7e9 + step, "step": step, "loss": rng.random()}).encode()
    if kind < 0.6:
        return b'{"step": %d, "loss": 1%s}' % (step, b"0" * rng.choice([1, 20, 400]))
    if kind < 0.7:
        big = b"9" * rng.choice([19, 20, 400])
        return b'{"step": %s, "samples": %s, "truncated": %s, "loss": 1}' % (big, big, big)
    if kind < 0.78:
        return rng.choice(
            [b'{"loss": NaN}', b'{"loss": "NaN"}', b'{"loss": Infinity}', b'{"loss": "-inf", "step": -1}']
        )
    if kind < 0.84:
        return b"[" * rng.choice([10, 1000, 100_000]) + b"]" * 10
    if kind < 0.9:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))).replace(b"\n", b" ")
    if kind < 0.95:
        return json.dumps({"event": "checkpoint", "path": rng.choice(["x", "", "/" * 300]), "step": [1]}).encode()
    return json.dumps({"step": step, "t": rng.choice(["now", None, 1e308]), "loss": {"a": 1}}).encode()


def regex_line(rng: random.Random, step: int) -> str:
    value = rng.choice(["2.31", "nan", "-nan(ind)", "1.#INF", "-1.#INF", "1.#QNAN", "inf,", "9" * 400, "x", "", "(3)"])
    return f"iter {step}: loss {value}"
