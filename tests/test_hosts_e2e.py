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

from runner.campaign.model import load_campaign
from runner.cli import main as cli_main
from runner.daemon.fleet import Fleet
from runner.daemon.fleet_poll import FleetPoller
from tests.helpers_report import _template_checkpoint
from tests.helpers_runner import STEPS_SCRIPT, write_campaign

WHY = why_no_netns()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=f"no namespaced hosts: {WHY}")]
FINAL_COPY = """
import shutil
shutil.copyfile(os.environ["CC_FINAL"], os.path.join(run_dir, "final.pt"))
shutil.copyfile(os.environ["CC_FINAL"][:-3] + ".json", os.path.join(run_dir, "final.json"))  # its sidecar
"""


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
    # the steps, then a real final checkpoint (made once) as the run's deliverable
    steps.write_text(STEPS_SCRIPT + FINAL_COPY)
    deliver = f'expects = ["{{run_dir}}/final.pt"]\nenv = {{ CC_FINAL = {json.dumps(str(_template_checkpoint()))} }}\n'
    path = write_campaign(
        local,
        [
            {"name": "control", "n": 20, "delay": 0.05, "extra": 'host = "a"\n' + deliver},
            {"name": "treat", "n": 30, "delay": 0.02, "extra": 'host = "b"\n' + deliver},
            {
                "name": "planted",
                "category": "exploratory",
                "n": 400,
                "delay": 0.05,
                "nan_at": 100,
                "extra": 'host = "b"\n',
            },
            {"name": "extra", "n": 5, "delay": 0.01, "extra": 'host = "b"\n' + deliver},
        ],
        phase=["control", "treat", "planted"],
    )
    text = path.read_text().replace('"steps.py"', json.dumps(str(steps)))
    text = text.replace(
        "[bundle]", '[decision]\nmetric = "loss"\ncontrol = "control"\nhigher_is_better = false\n\n[bundle]'
    )
    for name, extra in (("a", ""), ("b", 'gpu = "B200"\nprice_usd = 120.0\n')):
        text += (
            f'\n[[host]]\nname = "{name}"\nssh = "{name}"\ndir = "{hosts[name].dir}/camp"\n'
            f"campaign = {json.dumps(sys.executable + ' -m runner')}\n{extra}"
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

    snap = wait(lambda: (s := status(capsys)) and len(s["runs"]) == 3 and s, 30, "both hosts' runs")
    by_key = runs(snap)
    assert {k.split("-")[0] for k in by_key} == {"a/control", "b/treat", "b/planted"}
    assert {h["host"]: h["reachable"] for h in snap["hosts"]} == {"a": True, "b": True}
    cli_md = (Path(__file__).resolve().parent.parent / "docs" / "CLI.md").read_text(encoding="utf-8")
    merged = set(snap) | {k for h in snap["hosts"] for k in h} | {"host", "key"}
    assert not [k for k in merged if f"`{k}`" not in cli_md], "merged status keys docs/CLI.md does not name"
    assert {h["host"]: h["bundle"]["gpu"] for h in snap["hosts"]} == {"a": "RTX 4090", "b": "B200"}

    def planted_step(s):
        return next((r.get("step") or 0) for r in s["runs"] if r["variant"] == "planted")

    wait(lambda: planted_step(status(capsys)) >= 10, 30, "the planted run's steps")
    live = Fleet(load_campaign(LOCAL))  # what the console keeps: its connections live across polls
    assert all(h["reachable"] for h in live.status()["hosts"])
    # the console's poll: each host whole once, then only the runs that changed, through sshd
    poller = FleetPoller(live)
    first = poller.poll()
    assert first.runs is not None and {r["key"] for r in first.runs} == set(runs(snap))
    moved = wait(lambda: (p := poller.poll()).runs is None and p.changed and p, 10, "a poll of changes only")
    assert {r["variant"] for r in moved.changed} <= {"control", "treat", "planted"} and len(moved.changed) <= 3
    hosts["b"].partition()
    t_cut = time.time()
    assert [h["host"] for h in live.status()["hosts"] if not h["reachable"]] == ["b"]
    cut = poller.poll()  # b's runs leave the list: the poll is whole
    assert cut.runs is not None and {r["host"] for r in cut.runs} == {"a"}
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
    assert all(h["reachable"] for h in live.status()["hosts"])  # the same connections, made again
    healed = poller.poll()
    assert healed.runs is not None and {r["host"] for r in healed.runs} == {"a", "b"}
    live.close()
    planted = next(r for r in snap["runs"] if r["variant"] == "planted")
    assert planted["state"] == "stopped" and planted["stop_rule"] == "nonfinite", planted
    assert planted["stop_value"] is None and planted["stop_value_nonfinite"] == "nan"  # a number or null, never "nan"
    control = next(r for r in snap["runs"] if r["host"] == "a")
    assert control["state"] == "finished"
    assert not (LOCAL / ".campaign" / "hosts" / "b.json").exists()

    assert cli_main(["start", str(LOCAL), "extra"]) == 0
    assert capsys.readouterr().out.startswith("b/extra-")
    wait(lambda: all(r["state"] != "running" for r in status(capsys)["runs"]), 30, "every run to end")

    # every host's files and a snapshot of its ledger, then one report across the hosts
    pulled = tmp_path / "pulled"
    assert cli_main(["pull", str(LOCAL), str(pulled)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "a: verified: all" in out and "b: verified: all" in out
    assert (pulled / "a").is_dir() and (pulled / "b").is_dir()
    assert (pulled / ".campaign" / "hosts" / "b.ledger.sqlite").is_file()
    assert cli_main(["report", str(pulled), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outcome"] == "positive" and "treat" in report["conclusion"], report["conclusion"]
    assert report["committed_usd"] == 167.14 and report["approved"] == 3  # control, treat, extra
    (comparison,) = [c for c in report["comparisons"] if c["variant"] == "treat"]
    assert comparison["host"] == "b" and comparison["control_host"] == "a"
    assert any("across GPU types" in w for w in report["gpu_warnings"])
    assert {r["host"] for r in report["planned_vs_actual"]} == {"a", "b"}
    assert any(r["host"] == "b" and r["variant"] == "planted" for r in report["rejected"])
    md = (pulled / "deliverables" / "REPORT.md").read_text(encoding="utf-8")  # as on one host
    assert md.startswith("# Closing report:") and "a comparison across GPU types" in md

    assert cli_main(["down", str(LOCAL)]) == 0
    for name in ("a", "b"):
        r = hosts[name].ssh("sh", "-c", f"test -S {hosts[name].dir}/camp/.campaign/runner.sock; echo $?")
        assert r.stdout.strip() == "1"  # each runner stopped, its socket gone
