"""The console over several hosts takes each host's whole state once, then what changed: two real
runners stand for two hosts (only the SSH hop is left out: each host's requests go straight to its
runner's socket; the namespaced-hosts test runs the same poller through real sshd). An idle second
carries no run; a host that is cut off, comes back or restarts its runner makes the poll whole."""

from __future__ import annotations

import pytest
from helpers_hosts import two_host_brief

from console.fleet_source import FleetSource
from runner.campaign.model import load_campaign
from runner.daemon import client, control
from runner.daemon.fleet import Fleet, HostUnreachable
from tests.helpers_runner import wait_for, write_campaign


@pytest.fixture
def two_runners(tmp_path, monkeypatch):
    monkeypatch.setenv("CAMPAIGN_SLOTS", "2")
    monkeypatch.setenv("CAMPAIGN_GRACE_SECONDS", "5")
    folders = {name: tmp_path / name for name in ("a", "b")}
    for name, folder in folders.items():
        write_campaign(folder, [{"name": f"{name}1", "n": 20, "delay": 0.02}, {"name": f"{name}2", "n": 5}])
        control.up(load_campaign(folder))
    cut: set[str] = set()

    def request(self: Fleet, name: str, op: str, **args):
        if name in cut:
            raise HostUnreachable(f"host {name} unreachable since just now: cut off")
        return client.request(folders[name], op, **args)

    monkeypatch.setattr(Fleet, "request", request)
    yield folders, cut
    for folder in folders.values():
        control.down(load_campaign(folder), abort_runs=True)


async def test_a_host_sends_what_changed_and_is_taken_whole_when_it_goes_comes_or_restarts(two_runners, tmp_path):
    folders, cut = two_runners
    source = FleetSource(load_campaign(two_host_brief(tmp_path / "user")))
    try:
        first = await source.update()
        assert first.changed is None and {r["id"].split("/")[0] for r in first.snapshot["runs"]} == {"a", "b"}
        for folder in folders.values():
            wait_for(
                lambda f=folder: all(r["state"] == "finished" for r in client.request(f, "status")["runs"]) or None,
                60,
                "the host's runs to finish",
            )
        moved = await source.update()
        assert moved.changed is not None and {r["state"] for r in moved.changed} == {"finished"}
        assert len(moved.snapshot["runs"]) == 4 and all(r["state"] == "finished" for r in moved.snapshot["runs"])
        idle = await source.update()
        assert idle.changed == [] and len(idle.snapshot["runs"]) == 4  # nothing crossed but the heads

        cut.add("b")
        gone = await source.update()
        assert gone.changed is None and {r["id"].split("/")[0] for r in gone.snapshot["runs"]} == {"a"}
        assert [h["reachable"] for h in gone.snapshot["hosts"]] == [True, False]
        cut.clear()
        back = await source.update()
        assert back.changed is None and len(back.snapshot["runs"]) == 4
        assert [h["host"] for h in back.snapshot["hosts"]] == ["a", "b"]
        assert (await source.update()).changed == []

        control.down(load_campaign(folders["a"]))
        control.up(load_campaign(folders["a"]))
        restarted = await source.update()  # another epoch: its seq means nothing here any more
        assert restarted.changed is None and len(restarted.snapshot["runs"]) == 4
    finally:
        await source.close()
