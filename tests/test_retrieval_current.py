""" "Retrieved and verified" means everything that must leave the host: a pull while a run is still
going is not recorded as a complete retrieval, and a recorded one stops counting once a run
launches or ends after it (a real sshd on loopback, a real runner)."""

from __future__ import annotations

import sys
import time

import pytest

from runner.cli import main
from runner.ledger import queries
from runner.ledger import store as L
from tests.helpers_report import add_run, make_campaign
from tests.helpers_sshd import served_campaign

REMOTE = f"{sys.executable} -m runner"


@pytest.mark.slow
def test_a_pull_while_a_run_is_going_is_not_recorded_as_a_complete_retrieval(tmp_path, capsys):
    from runner.daemon import client

    with served_campaign(tmp_path, [{"name": "a", "n": 2000, "delay": 0.05}], until="running") as (server, c):
        dest = tmp_path / "laptop"
        rc = main(["pull", "-F", str(server.config), "--remote-campaign", REMOTE, f"testhost:{c.root}", str(dest)])
        out = capsys.readouterr().out
        assert rc == 0, out
        assert "belong to runs still going and may change: not a complete retrieval" in out
        assert "verified: all" not in out and "the host recorded" not in out
        assert client.request(c, "status")["retrieval"] is None


def test_a_recorded_retrieval_stops_counting_once_a_run_launches_or_ends_after_it(tmp_path):
    camp = make_campaign(tmp_path / "camp")
    ledger = L.Ledger(camp.state_dir / "ledger.sqlite")
    add_run(ledger.conn, camp, "control", config_hash="11111111", state="finished", launched_at=time.time() - 600)
    ledger.conn.execute("UPDATE runs SET ended_at = ?", (time.time() - 300,))
    ledger.conn.commit()
    ledger.event("retrieval_verified", files=3, bytes=10, to="me@laptop", dest="/x")
    assert queries.current_retrieval(ledger.conn)["to"] == "me@laptop"
    add_run(ledger.conn, camp, "rank16", config_hash="22222222", state="running", launched_at=time.time() + 1)
    assert queries.current_retrieval(ledger.conn) is None  # its files are not in what was pulled
    ledger.close()
