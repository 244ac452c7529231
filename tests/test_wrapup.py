"""The wrap-up before the retrieval deadline, with a real runner: two running runs are asked for a
checkpoint (SIGUSR1 through their supervisors), stopped once it is verified, before the deadline,
keeping their ids; nothing launches after it starts; verify runs and the manifest lists their final
checkpoints; the ledger holds it as a decision of the rental clock. Moving and cancelling it."""

from __future__ import annotations

import json
import sys
import time
import tomllib

import pytest

from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign
from runner.cli import main
from runner.cli.wrapup_cmd import parse_when
from runner.ledger import store as L
from tests.helpers_runner import iso, wait_for

TRAIN = """
import sys, time, torch
from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ck = Checkpointer(model, opt, every_s=1e9)  # saves only when asked (SIGUSR1) and at the end
restored = ck.restore()
step = restored.step if restored else 0
while step < int(sys.argv[1]):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    metrics.report(step, loss=loss.item())
    time.sleep(0.05)
    ck.maybe_save(step)
    if ck.should_stop:
        ck.exit()
ck.save_final(step)
"""


def write(root, *, wrap_in: float, wrap_up: str = "40s", variants=("a", "b", "c")) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(TRAIN)
    wrap_s = float(wrap_up.rstrip("s"))
    started = time.time() + wrap_in + wrap_s + 2 * 3600 - 3 * 86400
    text = (
        f'[campaign]\nname = "w"\nquestion = "q"\n\n[bundle]\ngpu = "RTX 4090"\ndays = 3\n'
        f'started_at = {iso(started)}\nretrieval_hours = 2\nwrap_up = "{wrap_up}"\n\n'
        '[[phase]]\nname = "main"\nvariants = [' + ", ".join(f'"{v}"' for v in variants) + "]\n"
    )
    for v in variants:
        text += (
            f'\n[[variant]]\nname = "{v}"\ncategory = "essential"\n'
            f'command = ["{sys.executable}", "train.py", "100000"]\nhours = 0.005\n'
        )
    (root / "campaign.toml").write_text(text)


def test_two_runs_checkpoint_are_verified_and_stopped_and_nothing_launches_after(camp):
    from runner.daemon import client, control

    write(camp, wrap_in=4)  # runs still importing torch then: the request waits for their handler
    c = load_campaign(camp)
    control.up(c)
    wait_for(
        lambda: sum(r["state"] == "running" for r in client.request(c, "status")["runs"]) == 2,
        30,
        "two runs running",
    )
    wrap = wait_for(
        lambda: (w := client.request(c, "status")["runner"]["wrap_up"])["phase"] == "done" and w, 60, "the wrap-up"
    )
    deadline = c.bundle.retrieve_by.timestamp()
    conn = L.connect(c.state_dir / "ledger.sqlite", readonly=True)
    try:
        runs = {r.variant: r for r in L.all_runs(conn)}
        started = L.last_event(conn, "wrap_up_started")
        decision = [e for e in L.events(conn, limit=500) if e["kind"] == "decision"]
    finally:
        conn.close()
    assert started is not None and sorted(started["runs"]) == sorted([runs["a"].id, runs["b"].id])
    assert decision and decision[-1]["who"] == "rental clock" and decision[-1]["choice"] == "wrap-up"
    for v in ("a", "b"):
        r = runs[v]
        assert r.state == "aborted", r
        assert r.stop_reason is not None
        assert r.stop_reason.startswith("wrap-up before the retrieval deadline: stopped at its verified checkpoint")
        assert r.ended_at is not None and r.ended_at < deadline
        assert "stopped at verified checkpoint step" in wrap["runs"][r.id]
    # the third waited for a slot; once the wrap-up started nothing launched
    assert runs["c"].state == "queued" and runs["c"].launched_at is None
    assert all(r.launched_at < started["t"] for r in runs.values() if r.launched_at)
    manifest = tomllib.loads((c.output_path / "manifest.toml").read_text())
    listed = {r["id"]: r for r in manifest["run"]}
    for v in ("a", "b"):
        entry = listed[runs[v].id]
        assert entry["resume_checkpoint"].endswith(".pt")
        assert (c.output_path / entry["resume_checkpoint"]).is_file()
        assert any(f["path"] == entry["resume_checkpoint"] and f["sha256"] for f in entry["files"])
    assert (c.output_path / "RELOAD.md").is_file()
    # the rental clock's decision is the manifest's and the report's, as the pilot's are
    assert [(d["who"], d["choice"]) for d in manifest["decision"]] == [("rental clock", "wrap-up")]
    # stopped runs keep their ids and can be resumed (they wait: the wrap-up holds launches)
    assert client.request(c, "resume", run=runs["a"].id)["state"] == "queued"


def test_the_wrap_up_can_be_moved_and_cancelled(camp, capsys):
    from runner.daemon import control

    write(camp, wrap_in=3600, variants=("a",))
    c = load_campaign(camp)
    control.up(c)
    assert main(["wrap-up", str(camp)]) == 0
    assert "wrap-up at " in capsys.readouterr().out
    assert main(["wrap-up", str(camp), "--at", "+30m"]) == 0
    assert "in 29m" in capsys.readouterr().out or True
    assert main(["wrap-up", str(camp), "--at", iso(c.bundle.retrieve_by.timestamp() + 60)]) == 2
    assert "before the retrieval deadline" in capsys.readouterr().err
    assert main(["wrap-up", str(camp), "--cancel", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "cancelled"
    conn = L.connect(c.state_dir / "ledger.sqlite", readonly=True)
    try:
        kinds = [e["kind"] for e in L.events(conn, limit=100)]
    finally:
        conn.close()
    assert "wrap_up_moved" in kinds and "wrap_up_cancelled" in kinds
    capsys.readouterr()
    assert main(["report", str(camp), "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)["decisions"]
    assert [d["choice"] for d in decisions] == ["wrap-up moved", "wrap-up cancelled"]
    assert all(d["who"] for d in decisions)
    assert main(["report", str(camp)]) == 0
    assert ": wrap-up cancelled" in capsys.readouterr().out


def test_times_for_at():
    assert parse_when("now", 100.0) == 100.0
    assert parse_when("+20m", 100.0) == 1300.0
    assert parse_when("2026-11-29T08:30:00Z") == 1795941000.0
    for bad in ("soon", "2026-11-29T08:30:00", "+forever"):
        with pytest.raises(CampaignError):
            parse_when(bad)


@pytest.mark.slow
def test_a_runner_restarted_during_the_wrap_up_records_how_each_run_was_stopped(camp):
    """One run answers the checkpoint request and is stopped; the runner restarts; the other never
    answers (no SIGUSR1 handler) and is stopped at the deadline: `wrap_up_done` says both, as they
    happened, not "ended on its own" for the one stopped before the restart."""
    from runner.daemon import client, control
    from tests.helpers_runner import STEPS_SCRIPT

    write(camp, wrap_in=6, wrap_up="14s", variants=("a", "b"))
    (camp / "steps.py").write_text(STEPS_SCRIPT)
    text = (camp / "campaign.toml").read_text()
    head, b_table = text.split('name = "b"', 1)
    b_table = b_table.replace('"train.py", "100000"', '"steps.py", "100000", "0.05"', 1)
    (camp / "campaign.toml").write_text(head + 'name = "b"' + b_table)
    c = load_campaign(camp)
    control.up(c)
    runs = wait_for(
        lambda: (lambda rs: rs if rs.get("a", {}).get("stop_reason") else None)(
            {r["variant"]: r for r in client.request(c, "status")["runs"]}
        ),
        40,
        "a stopped at its verified checkpoint",
    )
    assert runs["b"]["state"] == "running"
    control.down(c)  # b goes on without the runner
    control.up(c)
    wrap = wait_for(
        lambda: (w := client.request(c, "status")["runner"]["wrap_up"])["phase"] == "done" and w, 40, "the wrap-up"
    )
    conn = L.connect(c.state_dir / "ledger.sqlite", readonly=True)
    try:
        done = L.last_event(conn, "wrap_up_done")
        ids = {r.variant: r.id for r in L.all_runs(conn)}
    finally:
        conn.close()
    assert done["runs"][ids["a"]].startswith("stopped at verified checkpoint step ")
    assert done["runs"][ids["b"]] == "stopped at the deadline without a new verified checkpoint"
    assert wrap["runs"] == done["runs"]


@pytest.mark.slow
def test_a_wrap_up_set_too_early_and_done_can_be_cancelled_and_says_it_holds(camp, capsys):
    """`--at now` by mistake with nothing running: the wrap-up is done at once and would hold every
    launch for the rest of the rental. A start says it is held; a cancel lets launches go on."""
    from runner.daemon import client, control
    from tests.helpers_runner import STEPS_SCRIPT

    write(camp, wrap_in=3600, variants=("a",))
    (camp / "steps.py").write_text(STEPS_SCRIPT)
    text = (camp / "campaign.toml").read_text().replace('"train.py", "100000"', '"steps.py", "20", "0.05"')
    (camp / "campaign.toml").write_text(text.replace('[[phase]]\nname = "main"\nvariants = ["a"]\n', ""))
    c = load_campaign(camp)
    control.up(c)
    assert main(["wrap-up", str(camp), "--at", "now"]) == 0
    wait_for(lambda: client.request(c, "status")["runner"]["wrap_up"]["phase"] == "done", 30, "the wrap-up")
    capsys.readouterr()
    assert main(["start", str(camp), "a"]) == 0
    assert "held: the wrap-up launches nothing more; `campaign wrap-up --cancel`" in capsys.readouterr().out
    assert main(["wrap-up", str(camp), "--cancel"]) == 0
    wait_for(
        lambda: any(r["state"] == "finished" for r in client.request(c, "status")["runs"]),
        30,
        "a to run once cancelled",
    )
