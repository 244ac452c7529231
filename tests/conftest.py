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


def _stop_runners(folders, tmp_path) -> None:
    """Stop each folder's runner (aborting its runs), then kill every process left under tmp_path."""
    from runner.daemon import control
    from tests.helpers_runner import kill_processes_under

    for root in folders:
        try:
            if root.exists():
                control.down(root, abort_runs=True, timeout=40)  # by folder: its file may be half-edited
        except Exception:
            pass  # already down: the kill below still cleans up
    kill_processes_under(tmp_path)
    _remove_cgroups(folders)


def _remove_cgroups(folders) -> None:
    """The runs' cgroups a killed runner could not remove (the host's cgroup file system is shared)."""
    from runner.supervision import cgroups

    for root in folders:
        for campaign_dir in cgroups.campaign_cgroups(root):
            for run_dir in [p for p in campaign_dir.iterdir() if p.is_dir()]:
                cgroups.stop_group(run_dir, 0.0, kill_timeout=3.0)
            cgroups.remove(campaign_dir, tries=3)


@pytest.fixture
def camp(tmp_path, monkeypatch):
    """A campaign folder for tests that drive a real runner: two slots, a 5 s grace period, and a
    clean-up that stops the runner (aborting its runs) and kills every process left under tmp_path."""
    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "5")
    root = tmp_path / "camp"
    yield root
    _stop_runners([root], tmp_path)


@pytest.fixture
def live_runner(tmp_path, monkeypatch):
    """`live_runner(folder, slots=2)`: a real runner started on a written campaign folder, returned
    as its Campaign; stopped (runs aborted) and every process under tmp_path killed at the end."""
    from runner.campaign.model import load_campaign
    from runner.campaign.objects import Campaign
    from runner.daemon import control

    started = []

    def up(folder: Path, *, slots: int = 2) -> Campaign:
        monkeypatch.setenv("CAMPAIGN_SLOTS", str(slots))
        campaign = load_campaign(folder)
        started.append(Path(folder))
        control.up(campaign)
        return campaign

    yield up
    _stop_runners(started, tmp_path)


def pytest_terminal_summary(terminalreporter):
    """The fault-injection suite's figures (README, "Reliability"), when it ran."""
    from tests.helpers_faults import FIGURES, NOTES

    if FIGURES["faults injected"] or FIGURES["runs checked"]:
        terminalreporter.write_line("fault injection: " + ", ".join(f"{k}: {v}" for k, v in FIGURES.items()))
        for note in NOTES:
            terminalreporter.write_line(f"  {note}")
