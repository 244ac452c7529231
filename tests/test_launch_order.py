"""One launch order for the plan and the runner: `campaign plan --json` start times order the
variants exactly as a real runner with one slot launches them (mixed categories, two phases)."""

from __future__ import annotations

import json

import pytest

from runner.campaign.model import load_campaign
from runner.campaign.schedule import launch_order
from runner.campaign.statedir import paths_for
from runner.cli import main as cli_main
from runner.daemon import control
from runner.ledger import store as L
from tests.helpers_runner import wait_for, write_campaign

PHASES = """
[[phase]]
name = "first"
variants = ["x1", "u1", "e1"]

[[phase]]
name = "second"
variants = ["x2", "e2", "u2", "e3"]
"""
CATS = {"x1": "exploratory", "u1": "useful", "e1": "essential", "x2": "exploratory"}
CATS |= {"e2": "essential", "u2": "useful", "e3": "essential"}


def _campaign(root):
    variants = [{"name": n, "category": c, "n": 3, "delay": 0.01, "hours": 1} for n, c in CATS.items()]
    path = write_campaign(root, variants, phase=[])
    path.write_text(path.read_text() + PHASES)
    return load_campaign(root)


def _plan_order(root, capsys) -> list[str]:
    capsys.readouterr()
    assert cli_main(["plan", "--json", str(root)]) == 0
    items = [i for i in json.loads(capsys.readouterr().out)["items"] if i["kind"] == "variant"]
    return [i["name"] for i in sorted(items, key=lambda i: (i["start_hours"], i["gpu"] or 0))]


def test_the_order_is_phase_then_category_then_the_phases_own_order(tmp_path, capsys):
    c = _campaign(tmp_path / "c")
    expected = ["e1", "u1", "x1", "e2", "e3", "u2", "x2"]
    assert launch_order(c, CATS) == expected
    assert _plan_order(c.root, capsys) == expected


@pytest.mark.slow
def test_plan_start_times_are_the_runners_launch_order_on_one_slot(camp, capsys, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "1")
    c = _campaign(camp)
    planned = _plan_order(camp, capsys)
    control.up(c)

    def launched() -> list[str] | None:
        conn = L.connect(paths_for(c).ledger, readonly=True)
        try:
            rows = conn.execute("SELECT variant, launched_at, state FROM runs").fetchall()
        finally:
            conn.close()
        if len(rows) < len(CATS) or any(r["state"] != "finished" for r in rows):
            return None
        return [r["variant"] for r in sorted(rows, key=lambda r: r["launched_at"])]

    assert wait_for(launched, what="every run to finish", timeout=60) == planned
