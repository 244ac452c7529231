"""Shared test set-up. Area-specific fixtures live in each area's own helper module
(tests/helpers_<area>.py) so the areas can grow without touching each other."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Tests never reach a real GPU from CI; a test that wants NVML hands the layer a recorded backend.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


import pytest  # noqa: E402


@pytest.fixture
def camp(tmp_path, monkeypatch):
    """A campaign folder for tests that drive a real runner: two slots, a 5 s grace period, and a
    clean-up that stops the runner (aborting its runs) and kills every process left under tmp_path."""
    from runner.campaign.model import load_campaign
    from runner.daemon import control
    from tests.helpers_runner import kill_processes_under

    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "5")
    root = tmp_path / "camp"
    yield root
    try:
        if (root / "campaign.toml").exists():
            control.down(load_campaign(root), abort_runs=True, timeout=40)
    except Exception:
        pass
    kill_processes_under(tmp_path)


def pytest_terminal_summary(terminalreporter):
    """The fault-injection suite's figures (README, "Reliability"), when it ran."""
    from tests.helpers_faults import FIGURES, NOTES

    if FIGURES["faults injected"] or FIGURES["runs checked"]:
        terminalreporter.write_line("fault injection: " + ", ".join(f"{k}: {v}" for k, v in FIGURES.items()))
        for note in NOTES:
            terminalreporter.write_line(f"  {note}")
