"""Contracts the layout keeps, checked on the source: the ledger module holds the SQL, and run
states are compared through RunState rather than as bare words."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for top in ("runner", "console") for p in (ROOT / top).rglob("*.py")]
SQL = re.compile(r"\.execute(?:many|script)?\(|\"(?:SELECT|INSERT|UPDATE|DELETE) ")
BARE_STATE = re.compile(
    r"""(?:\["state"\]|\.get\("state"\)|\.state|\bstate)\s*(?:==|!=|(?:not\s+)?in\s+\()\s*["'](?:queued|running|finished|failed|stopped|aborted|refused)["']"""
)

# the pilot's own words (its status and its re-estimated items), which share "running" with runs
OTHER_VOCABULARIES = {"runner/closing/pilot_estimate.py", "console/screens/pilot_dialog.py"}


def test_no_sql_outside_the_ledger_package():
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in SOURCES
        if "ledger" not in p.relative_to(ROOT).parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if SQL.search(line)
    ]
    assert not found, found


def test_run_states_are_compared_through_the_enum():
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in SOURCES
        if str(p.relative_to(ROOT)) not in OTHER_VOCABULARIES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if BARE_STATE.search(line)
    ]
    assert not found, found
