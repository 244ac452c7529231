"""Two hosts in network namespaces (own sshd, inbound SSH only, runner sockets reachable only
through SSH), driven from the user's side: `up` sends the file and starts both runners, `status`
merges them, a partition shows the host unreachable with since when while its runner still stops
a NaN run there, a start routed to it is refused with the reason, and it reconnects."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers_netns import NsHosts, why_no_netns

from runner.cli import main as cli_main
from tests.helpers_runner import STEPS_SCRIPT, write_campaign

WHY = why_no_netns()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=f"no namespaced hosts: {WHY}")]


@pytest.fixture
def hosts():
    base = Path(tempfile.mkdtemp(prefix="cc14-", dir="/tmp"))  # short: Unix socket paths are
    try:
        with NsHosts(base / "n") as hs:
            yield hs
    finally:
        shutil.rmtree(base, ignore_errors=True)


def campaign_on(hosts: NsHosts, local: Path) -> Path:
    steps = local.parent / "steps.py"  # outside the hosts' private folders: every host sees it
    local.parent.mkdir(parents=True, exist_ok=True)
    steps.write_text(STEPS_SCRIPT)
    path = write_campaign(
        local,
        [
            {"name": "control", "n": 20, "delay": 0.05, "extra": 'host = "a"\n'},
            {"name": "treat", "n": 400, "delay": 0.05, "nan_at": 120, "extra": 'host = "b"\n'},
            {"name": "extra", "n": 5, "delay": 0.01, "extra": 'host = "b"\n'},
        ],
        phase=["control", "treat"],
    )
    text = path.read_text().replace('"steps.py"', json.dumps(str(steps)))
    for name in ("a", "b"):
        text += (
            f'\n[[host]]\nname = "{name}"\nssh = "{name}"\ndir = "{hosts[name].dir}/camp"\n'
            f"campaign = {json.dumps(sys.executable + ' -m runner')}\n"
        )
    path.write_text(text)
    return path


def status(capsys) -> dict:
    capsys.readouterr()
    assert cli_main(["status", str(LOCAL), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


LOCAL = Path()


def test_two_hosts_from_the_users_side(hosts, tmp_path, capsys, monkeypatch):
    global LOCAL
    LOCAL = tmp_path / "local"
    campaign_on(hosts, LOCAL)
    monkeypatch.setenv("CAMPAIGN_SSH_CONFIG", str(hosts.ssh_config))

    assert cli_main(["up", str(LOCAL)]) == 0
    out = capsys.readouterr().out
    assert "a: campaign file sent" in out and "b: campaign file sent" in out
    assert not (hosts["a"].dir / "camp").exists()  # the host's folder is not visible from here

    def runs(snap):
        return {r["key"]: r for r in snap["runs"]}

    snap = wait(lambda: (s := status(capsys)) and len(s["runs"]) == 2 and s, 30, "both hosts' runs")
    by_key = runs(snap)
    assert {k.split("-")[0] for k in by_key} == {"a/control", "b/treat"}
    assert {h["host"]: h["reachable"] for h in snap["hosts"]} == {"a": True, "b": True}
    assert all(h["bundle"]["gpu"] == "RTX 4090" for h in snap["hosts"])

    wait(lambda: any(r["host"] == "b" and (r.get("step") or 0) >= 10 for r in status(capsys)["runs"]), 30, "b steps")
    hosts["b"].partition()
    t_cut = time.time()
    snap = status(capsys)
    hb = next(h for h in snap["hosts"] if h["host"] == "b")
    assert hb["reachable"] is False and t_cut - 1 <= hb["unreachable_since"] <= time.time()
    assert next(h for h in snap["hosts"] if h["host"] == "a")["reachable"] is True

    # a start routed to the unreachable host is refused with the reason, never queued
    assert cli_main(["start", str(LOCAL), "extra"]) == 1
    err = capsys.readouterr().err
    assert "start extra refused, nothing queued" in err and "host b unreachable since" in err

    time.sleep(max(0.0, 8 - (time.time() - t_cut)))  # the NaN at step 120 comes while b is cut off
    hosts["b"].heal()
    snap = wait(
        lambda: (s := status(capsys)) and all(h["reachable"] for h in s["hosts"]) and s, 30, "b to answer again"
    )
    treat = next(r for r in snap["runs"] if r["host"] == "b")
    assert treat["state"] == "stopped" and treat["stop_rule"] == "nonfinite", treat
    control = next(r for r in snap["runs"] if r["host"] == "a")
    assert control["state"] == "finished"
    assert not (LOCAL / ".campaign" / "hosts" / "b.json").exists()

    assert cli_main(["start", str(LOCAL), "extra"]) == 0
    assert capsys.readouterr().out.startswith("b/extra-")
    assert cli_main(["down", str(LOCAL)]) == 0
    for name in ("a", "b"):
        r = hosts[name].ssh("sh", "-c", f"test -S {hosts[name].dir}/camp/.campaign/runner.sock; echo $?")
        assert r.stdout.strip() == "1"  # each runner stopped, its socket gone
