"""A host's own runner: it knows which declared host its folder is, loads that host's bundle,
queues only the variants placed on it and refuses the others with the reason."""

from __future__ import annotations

import pytest

from runner.campaign.errors import CampaignError
from runner.campaign.host_view import as_host, recorded_host
from runner.campaign.model import load_campaign
from runner.cli import main as cli_main
from runner.daemon import client, control
from tests.helpers_runner import run_of, wait_for, write_campaign

pytestmark = pytest.mark.slow

HOSTS = """
[[host]]
name = "a"
ssh = "user@10.0.0.1"
dir = "/srv/camp"

[[host]]
name = "b"
ssh = "gpu-b"
dir = "/srv/camp"
gpus = 2
price_usd = 40.0
"""


def two_host_campaign(camp):
    path = write_campaign(
        camp,
        [
            {"name": "control", "n": 3, "delay": 0.01, "extra": 'host = "a"\n'},
            {"name": "wide", "n": 3, "delay": 0.01, "extra": 'host = "b"\ngpus = 2\n'},
        ],
    )
    path.write_text(path.read_text() + HOSTS)
    return path


def test_up_needs_the_host_then_the_runner_runs_only_what_is_placed_on_it(camp, capsys):
    two_host_campaign(camp)
    with pytest.raises(CampaignError, match=r"campaign up --host NAME"):  # which host is this folder?
        as_host(load_campaign(camp))
    assert cli_main(["up", str(camp), "--host", "c"]) == 2
    assert "declares hosts a, b" in capsys.readouterr().err

    assert cli_main(["up", str(camp), "--host", "a"]) == 0
    c = load_campaign(camp)
    assert recorded_host(c) == "a"
    wait_for(lambda: (run_of(client.request(c, "status"), "control") or {}).get("state") == "finished", timeout=30)
    snap = client.request(c, "status")
    assert run_of(snap, "wide") is None  # placed on b: never queued here
    assert cli_main(["start", str(camp), "wide"]) == 2
    err = capsys.readouterr().err
    assert "placed on host 'b', not on this host ('a')" in err

    assert cli_main(["up", str(camp), "--host", "b"]) == 2  # one folder, one host
    assert "already host 'a'" in capsys.readouterr().err
    control.down(c)
