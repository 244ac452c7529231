"""Whether a variant's `metrics_regex` can give numbers at all, before anything runs (`campaign
check`), and whether an earlier run's output already shows it matching lines without numbers.

Apart from `line_parsers` because it judges a pattern rather than parsing lines. A named group
whose pattern cannot hold any number (`(?P<loss>[a-z]+)`) leaves every matched line empty; one that
can match nothing at all (`(?P<loss>[0-9.]*)`, written for HF 4.x's `'loss': 5.38`, on 5.x's
`'loss': '5.38'`) matches every line and gives nothing. Each group's pattern is tried, compiled on
its own with the regex's flags, against a set of number spellings (`parse_number` accepts all of them).
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from runner.supervision.line_parsers import empty_match_warning, line_parser

# finite numbers as scripts print them (a group that can hold only nan/inf is no metric either)
NUMBER_SPELLINGS = (
    "0",
    "7",
    "42",
    "1000",
    "5.381",
    "0.5",
    ".5",
    "5.",
    "-1",
    "-2.5",
    "+1.5",
    "1e-3",
    "5e-05",
    "1.5E+02",
    "'5.381'",
    '"5.381"',
    "5.381,",
    "'5.381',",
    "5.381;",
)
OUTPUT_TAIL_BYTES = 1 << 20  # of an earlier run's output.log, tried against the regex
_NAMED = re.compile(r"\(\?P<([A-Za-z_]\w*)>")


@dataclass(frozen=True)
class RegexFinding:
    """One thing `check` says about a variant's regex; `field` names the campaign file's key."""

    text: str
    field: str = "metrics_regex"


def group_patterns(pattern: str) -> dict[str, str] | None:
    """Each named group's own pattern text, or None when the scan cannot tell (it then says nothing)."""
    out: dict[str, str] = {}
    stack: list[tuple[str | None, int]] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":  # a class: its brackets and parentheses are literal
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
            continue
        if ch == "(":
            m = _NAMED.match(pattern, i)
            stack.append((m.group(1), m.end()) if m else (None, i + 1))
            i = m.end() if m else i + 1
            continue
        if ch == ")" and stack:
            name, start = stack.pop()
            if name is not None:
                out[name] = pattern[start:i]
        i += 1
    try:
        if stack or set(out) != set(re.compile(pattern).groupindex):
            return None
    except re.error:
        return None
    return out


def regex_findings(pattern: str) -> list[RegexFinding]:
    """What is wrong with `pattern` as a metrics regex (empty: nothing found)."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return []  # the campaign file's loader already refused it
    groups = group_patterns(pattern)
    if groups is None:
        return []
    never: list[str] = []
    maybe_empty: list[str] = []
    for name, body in groups.items():
        try:
            sub = re.compile(body, compiled.flags)
        except re.error:  # a back-reference to another group: cannot be judged alone
            continue
        if not any(sub.fullmatch(s) for s in NUMBER_SPELLINGS):
            never.append(name)
        elif sub.fullmatch(""):
            maybe_empty.append(name)
    out = []
    if never and len(never) == len(groups):
        out.append(
            RegexFinding(
                f"none of its named groups ({', '.join(never)}) can hold a number: every line it "
                "matches gives nothing (e.g. (?P<loss>[-+.0-9eE]+))"
            )
        )
    elif never:
        out.extend(RegexFinding(f"group {g!r} can never hold a number: it is never recorded") for g in never)
    if maybe_empty:
        names = ", ".join(repr(g) for g in maybe_empty)
        out.append(
            RegexFinding(
                f"group{'s' if len(maybe_empty) > 1 else ''} {names} can match nothing at all (a `*` or `?`): "
                "a line where it does gives no number (HF 5.x quotes its values: '5.381'); use `+`"
            )
        )
    if set(groups) == {"step"}:
        out.append(RegexFinding("it has only a (?P<step>...) group: steps are recorded, no metric"))
    return out


def earlier_output_warning(
    root: Path, variant_name: str, metrics_regex: str | None, metrics_format: str | None
) -> tuple[Path, str] | None:
    """The newest earlier run of the variant whose output.log the current regex or format
    matches without numbers: (that file, the warning), or None."""
    if not metrics_regex and not metrics_format:
        return None
    runs = root / "runs"
    own = re.compile(re.escape(variant_name) + r"-[0-9a-f]{8}")
    logs = [p for p in runs.glob(f"{glob.escape(variant_name)}-*/output.log") if own.fullmatch(p.parent.name)]
    if not logs:
        return None
    try:
        newest = max(logs, key=lambda p: p.stat().st_mtime)
        with newest.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - OUTPUT_TAIL_BYTES))
            block = f.read()
    except OSError:
        return None
    parser = line_parser(metrics_regex, metrics_format)
    if parser is None:
        return None
    if size > OUTPUT_TAIL_BYTES:  # the first line read is cut: left out
        block = block[block.find(b"\n") + 1 :]
    records, _ = parser.parse_block(block)
    warning = empty_match_warning(parser.matched_empty, len(records), metrics_format)
    return (newest, warning) if warning else None
