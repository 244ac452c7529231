"""Unmodified scripts' stdout lines as metric records, through the variant's `metrics_regex` or
a built-in format (`metrics_format = "hf"`).

Apart from `metric_stream` because it is text parsing, not file following: the supervisor feeds
it its child's stdout pipe, the console and the runner's watcher hand it to a `MetricStream`.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from runner.campaign.numbers import parse_number_text


class _LineParser:
    """What every line format shares: a block of stdout bytes parsed line by line (a line that is
    not a metric line is ordinary output, never counted as a bad line)."""

    matched_empty: int  # lines the format matched that gave no number

    def parse(self, line: str) -> dict | None:
        raise NotImplementedError

    def parse_block(self, block: bytes) -> tuple[list[dict], int]:
        records = [rec for raw in block.decode("utf-8", "replace").splitlines() if (rec := self.parse(raw)) is not None]
        return records, 0


class RegexMetrics(_LineParser):
    """Named groups of `pattern` become a record: `step` an int, every other group a float.

    Values such as `nan`, `inf`, `-inf`, `NaN` parse as non-finite floats; a trailing `,` or `;`
    is ignored. A line that does not match yields None (ordinary output, not garbage).
    """

    format_name: str | None = None  # the variant's metrics_format (None: its metrics_regex)

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern)
        self.groups = tuple(self.pattern.groupindex)
        self.matched_empty = 0  # lines it matched that gave no number: a regex that parses nothing

    def parse(self, line: str) -> dict | None:
        m = self.pattern.search(line)
        if m is None:
            return None
        rec: dict[str, Any] = {}
        for name, text in m.groupdict().items():
            if text is None:
                continue
            value = parse_number(text)
            if value is None:
                continue
            if name == "step":
                if not math.isfinite(value):
                    continue
                rec["step"] = int(value)
            else:
                rec[name] = value
        if not rec:
            self.matched_empty += 1
        return rec or None


def parse_number(text: str) -> float | None:
    """`2.31`, `nan`, `-inf`, `-nan(ind)`, `1.#INF`, `1e-3,` as floats; None when it is not a number.
    Quoted values (`'5.381',` as the HF Trainer 5.x prints them) parse too."""
    value = parse_number_text(text)
    if value is None:
        unquoted = text.strip().rstrip(",;:)]}").strip("'\"")
        if unquoted != text.strip():
            value = parse_number_text(unquoted)
    return value


class HfLogMetrics(_LineParser):
    """`metrics_format = "hf"`: the Hugging Face Trainer's log lines, unmodified.

    4.x prints `{'loss': 5.381, 'grad_norm': 1.28, 'learning_rate': 5e-05, 'epoch': 0.01}`, 5.x
    the same with quoted values (`'loss': '5.381'`). Neither carries the step: it is counted, one
    per training log line (a line with `loss`), so it is the step in units of `logging_steps`
    unless the line has a `step` (the campaign_train callback reports the true global step).
    Evaluation lines (`eval_*`) take the current step; the final summary (`train_runtime`) is skipped.
    """

    LINE = re.compile(r"\{'[A-Za-z_]+': .*\}")
    format_name: str | None = "hf"

    def __init__(self) -> None:
        self.step = 0
        self.matched_empty = 0

    def parse(self, line: str) -> dict | None:
        m = self.LINE.search(line)
        if m is None or len(m.group(0)) > 10_000:
            return None
        try:
            raw = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        if not isinstance(raw, dict) or "train_runtime" in raw:
            return None
        rec: dict[str, Any] = {}
        for key, val in raw.items():
            value = parse_number(val) if isinstance(val, str) else val
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rec[str(key)] = float(value)
        if not rec:
            self.matched_empty += 1
            return None
        step = rec.get("step")
        if step is not None and math.isfinite(step):
            self.step = int(step)
        elif "loss" in rec:
            self.step += 1
        rec["step"] = self.step
        return rec


LineParser = RegexMetrics | HfLogMetrics

EMPTY_MATCH_WARNING = 3  # lines matched without a number before it is said


def empty_match_warning(matched_empty: int, parsed: int, metrics_format: str | None = None) -> str | None:
    """The plain words for a regex (or format) that matches lines yet gives no number from them,
    once it matched a few such lines and parsed none (None: nothing to say; a regex that also
    matches other output while its metric lines parse is left alone). One wording for output.log,
    `campaign status` and the console."""
    if matched_empty < EMPTY_MATCH_WARNING or parsed > 0:
        return None
    what = f'metrics_format = "{metrics_format}"' if metrics_format else "metrics_regex"
    hint = (
        "the output is not in that format"
        if metrics_format
        else 'check its named groups, e.g. (?P<loss>[-+.0-9eE]+); HF Trainer lines: metrics_format = "hf"'
    )
    return f"metrics: {matched_empty} lines matched {what} but gave no numbers: {hint}"


def line_parser(metrics_regex: str | None, metrics_format: str | None = None) -> LineParser | None:
    """How a run's stdout becomes metrics: a built-in format, its regex, or None (metrics.jsonl)."""
    if metrics_format == "hf":
        return HfLogMetrics()
    return RegexMetrics(metrics_regex) if metrics_regex else None
