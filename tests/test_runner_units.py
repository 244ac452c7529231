"""The runner's pieces without a runner: wire format, peer check, logind decision, slots, run ids,
state derivation, ledger writes and the status snapshot."""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time

import msgspec
import pytest

from runner.campaign.model import load_campaign
from runner.campaign.runid import config_hash, run_id
from runner.daemon import protocol
from runner.daemon.client_requests import peer_allowed, peer_credentials
from runner.daemon.detach import LogindFacts, decide_detach, kills_user_processes
from runner.daemon.slots import initial_queue, plan_slots
from runner.daemon.status import build_snapshot
from runner.daemon.watcher import derive_end
from runner.ledger import store as L
from tests.helpers_runner import write_campaign

# -- protocol ---------------------------------------------------------------------------------


def test_protocol_round_trip_and_non_finite_floats():
    msg = {"id": 1, "ok": True, "result": {"loss": float("nan"), "x": [float("inf"), -math.inf, 1.5]}}
    line = protocol.encode(msg)
    assert line.endswith(b"\n") and b"NaN" not in line and b"Infinity" not in line
    back = protocol.decode(line)
    assert back["result"] == {"loss": "nan", "x": ["inf", "-inf", 1.5]}


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"", "empty"),
        (b"{oops", "not JSON"),
        (b"[1]", "JSON object"),
        (b"\xff\xfe", "UTF-8"),
        (b" \r\n", "empty"),
        (b'{"a": "\xff"}\n', "UTF-8"),  # read as bytes, not decoded to a str first
    ],
)
def test_protocol_rejects_malformed_lines(raw, words):
    with pytest.raises(protocol.ProtocolError, match=words):
        protocol.decode(raw)


def test_protocol_checks_ops_and_arguments():
    assert protocol.check_request({"id": 3, "op": "abort", "run": "a-1", "reason": "x"}) == (
        3,
        "abort",
        {"run": "a-1", "reason": "x"},
    )
    with pytest.raises(protocol.ProtocolError, match="unknown op"):
        protocol.check_request({"id": 1, "op": "shell", "cmd": "ls"})
    with pytest.raises(protocol.ProtocolError, match="needs run"):
        protocol.check_request({"id": 1, "op": "resume"})
    with pytest.raises(protocol.ProtocolError, match="'op'"):
        protocol.check_request({"id": 1})


# -- peer credentials -------------------------------------------------------------------------


def test_peer_credentials_name_the_connecting_process():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid, uid, gid = peer_credentials(a)
        assert (pid, uid, gid) == (os.getpid(), os.getuid(), os.getgid())
    finally:
        a.close()
        b.close()
    assert peer_allowed(os.getuid(), os.getuid())
    assert not peer_allowed(os.getuid() + 1, os.getuid())
    assert not peer_allowed(0, 1000)  # not even root gets into another user's runner
    assert not peer_allowed(None, 1000)


# -- logind -----------------------------------------------------------------------------------


def facts(**kw):
    base = dict(
        kill_user_processes=None,
        logind_conf=None,
        in_login_session=True,
        systemd_run="/usr/bin/systemd-run",
        user_manager=True,
    )
    base.update(kw)
    return LogindFacts(**base)


def test_logind_decision():
    assert not kills_user_processes(facts())  # systemd's default
    assert kills_user_processes(facts(logind_conf="[Login]\nKillUserProcesses=yes\n"))
    assert not kills_user_processes(facts(logind_conf="#KillUserProcesses=yes\n"))
    assert not kills_user_processes(facts(kill_user_processes="no", logind_conf="KillUserProcesses=yes"))
    assert decide_detach(facts()).how == "session" and decide_detach(facts()).warning is None
    plan = decide_detach(facts(kill_user_processes="yes"))
    assert plan.how == "systemd-run" and plan.warning is None
    plan = decide_detach(facts(kill_user_processes="yes", systemd_run=None))
    assert plan.how == "session" and "will NOT outlive" in plan.warning
    plan = decide_detach(facts(kill_user_processes="yes", user_manager=False))
    assert plan.how == "session" and plan.warning
    plan = decide_detach(facts(kill_user_processes="yes", in_login_session=False))
    assert plan.how == "session" and plan.warning is None


# -- slots and order --------------------------------------------------------------------------


def test_slots_and_launch_order(tmp_path):
    write_campaign(
        tmp_path,
        [
            {"name": "x", "category": "exploratory"},
            {"name": "c", "category": "essential"},
            {"name": "u", "category": "useful"},
            {"name": "c2", "category": "essential"},
            {"name": "off"},
        ],
        phase=["x", "c", "u", "c2"],
    )
    c = load_campaign(tmp_path)
    assert initial_queue(c) == ["c", "c2", "u", "x"]  # "off" is in no phase: only on start
    cpu = plan_slots(c, gpu_count=0, nvml_error="no driver", env={})
    assert cpu.total == 1 and cpu.labels == ("",) and "no driver" in cpu.note
    assert plan_slots(c, gpu_count=1, nvml_error=None, env={}).labels == ("0",)
    more = plan_slots(c, gpu_count=4, nvml_error=None, env={})  # bundle rents 1 GPU
    assert more.total == 1 and "rents 1" in more.note
    forced = plan_slots(c, gpu_count=0, nvml_error="x", env={"CAMPAIGN_SLOTS": "3"})
    assert forced.total == 3 and forced.labels == ("", "", "") and "CAMPAIGN_SLOTS" in forced.note


# -- run identity -----------------------------------------------------------------------------


def test_run_id_follows_the_configuration(tmp_path):
    write_campaign(tmp_path, [{"name": "a"}], phase=[])
    c = load_campaign(tmp_path)
    rid = run_id(c, c.variant("a"))
    assert rid.startswith("a-") and len(rid) == len("a-") + 8
    assert run_id(load_campaign(tmp_path), c.variant("a")) == rid  # stable
    text = (tmp_path / "campaign.toml").read_text()
    (tmp_path / "campaign.toml").write_text(text.replace('category = "essential"', 'category = "useful"'))
    assert run_id(load_campaign(tmp_path), load_campaign(tmp_path).variant("a")) == rid  # scheduling only
    (tmp_path / "campaign.toml").write_text(text.replace('metric = "loss"', 'metric = "dev_loss"'))
    c2 = load_campaign(tmp_path)
    assert run_id(c2, c2.variant("a")) != rid  # a rule changed
    (tmp_path / "campaign.toml").write_text(text)
    (tmp_path / "steps.py").write_text((tmp_path / "steps.py").read_text() + "\n# a fix\n")
    c3 = load_campaign(tmp_path)
    assert config_hash(c3, c3.variant("a")) != rid.split("-")[1]  # the script changed


# -- state derivation -------------------------------------------------------------------------


def test_state_from_the_run_folder_files():
    assert derive_end(None, None, 1)[0] == "failed" and "supervisor lost" in derive_end(None, None, 1)[1]
    assert derive_end({"attempt": 1, "returncode": 0}, None, 1) == ("finished", None)
    assert derive_end(
        {"attempt": 1, "returncode": None, "signal": 15, "killed_by": "rule"},
        {"attempt": 1, "kind": "nonfinite", "reason": "loss is nan"},
        1,
    ) == ("stopped", "loss is nan")
    # a verdict from an earlier attempt does not stop this one
    assert derive_end({"attempt": 2, "returncode": 0}, {"attempt": 1, "reason": "old"}, 2) == ("finished", None)
    assert derive_end({"attempt": 1, "returncode": None, "signal": 15, "killed_by": "abort"}, None, 1)[0] == "aborted"
    assert derive_end({"attempt": 1, "returncode": 3}, None, 1) == ("failed", "exit code 3")
    assert derive_end({"attempt": 1, "returncode": 0}, None, 2)[0] == "failed"  # exit.json of another attempt


# -- ledger and snapshot ----------------------------------------------------------------------


def test_ledger_records_and_snapshot_reads_it(tmp_path):
    write_campaign(
        tmp_path,
        [{"name": "a", "extra": 'checkpoint_every = "10m"\n'}],
        phase=[],
        rules='[[rule]]\nkind = "nonfinite"\nmetric = "loss"\n[[rule]]\nkind = "truncated"\nmax_fraction = 0.1\n',
    )
    c = load_campaign(tmp_path)
    led = L.Ledger(tmp_path / ".campaign" / "ledger.sqlite")
    now = time.time()
    led.insert_run(
        {
            "id": "a-00000001",
            "variant": "a",
            "category": "essential",
            "config_hash": "00000001",
            "state": "running",
            "run_dir": str(tmp_path / "runs" / "a-00000001"),
            "planned_hours": 1,
            "queued_at": now - 100,
            "launched_at": now - 90,
            "attempt_started_at": now - 90,
            "attempts": 1,
        }
    )
    led.record_metrics(
        "a-00000001",
        [
            {"t": now - 50, "step": 10, "loss": 2.0, "truncated": 1, "samples": 100},
            {"event": "checkpoint", "step": 10},
            {"t": now - 40, "step": 20, "loss": float("nan"), "samples": 100},
        ],
        offset=123,
        bad_lines=2,
        restarts=0,
    )
    led.upsert_checkpoint(
        "a-00000001", "/x/ckpt-10.pt", step=10, t=now - 45, verified=1, grade="full", holds=["model"], problems=[]
    )
    led.event("verdict", "a-00000001", durable=True, rule="nonfinite", value=float("nan"))
    ro = L.connect(led.path, readonly=True)
    with pytest.raises(sqlite3.OperationalError):
        ro.execute("DELETE FROM runs")
    typed = build_snapshot(
        c, ro, runner={"pid": 1, "started_at": now, "version": "t"}, slots={"total": 1, "busy": 1}, now=now
    )
    line = protocol.encode(protocol.ok(1, typed))  # what the socket sends: msgspec, strict JSON
    assert b"NaN" not in line and json.loads(line)["result"] == json.loads(json.dumps(msgspec.to_builtins(typed)))
    snap = msgspec.to_builtins(typed)
    json.dumps(snap, allow_nan=False)  # strict JSON
    (run,) = snap["runs"]
    assert run["step"] == 20 and run["loss"] == "nan" and run["bad_lines"] == 2
    assert run["checkpoint_step"] == 10 and run["checkpoint_verified"] is True
    assert 500 < run["next_checkpoint_seconds"] < 600  # 10 min after the checkpoint 45 s ago
    states = {r["kind"]: r for r in run["rules"]}
    assert states["nonfinite"]["state"] == "fired" and states["truncated"]["value"] == pytest.approx(0.005)
    assert states["truncated"]["state"] == "ok"
    assert snap["events"][-1]["kind"] == "verdict" and snap["bundle"]["warning"] == "ok"
    assert [v["runs"] for v in snap["variants"]] == [["a-00000001"]]
    ro.close()
    led.close()


def test_run_watch_follows_a_folder_and_resumes_from_the_ledger_offset(tmp_path):
    from runner.daemon.watcher import RunWatch

    run_dir = tmp_path / "runs" / "a-00000002"
    (run_dir / "checkpoints").mkdir(parents=True)
    led = L.Ledger(tmp_path / "l.sqlite")
    run = {
        "id": "a-00000002",
        "variant": "a",
        "category": "essential",
        "config_hash": "00000002",
        "state": "running",
        "run_dir": str(run_dir),
        "planned_hours": 1,
        "attempts": 1,
    }
    led.insert_run(run)
    metrics = run_dir / "metrics.jsonl"
    with open(metrics, "w") as f:
        f.write('{"t": 1, "step": 1, "loss": 3.0}\nnot json\n{"t": 2, "step": 2, "lo')  # partial last line
    w = RunWatch(led, led.run(run["id"]), root=tmp_path, metrics_regex=None, checkpoint_glob=None)
    assert w.poll()
    assert L.metric_last(led.conn)["a-00000002"]["loss"]["value"] == 3.0
    with open(metrics, "a") as f:
        f.write(
            'ss": 2.5}\n{"t": 3, "event": "checkpoint", "step": 2, "path": "runs/a-00000002/checkpoints/c2.pt", '
            '"bytes": 10}\n'
        )
    w.poll()
    prog = L.progress(led.conn)["a-00000002"]
    assert (prog["lines"], prog["bad_lines"], prog["last_step"]) == (2, 1, 2)
    assert L.metric_last(led.conn)["a-00000002"]["loss"]["value"] == 2.5
    (run_dir / "checkpoints" / "c2.verify.json").write_text(
        json.dumps(
            {
                "path": str(tmp_path / "runs/a-00000002/checkpoints/c2.pt"),
                "step": 2,
                "verified": True,
                "grade": "full",
                "holds": ["model"],
                "problems": [],
                "verify_seconds": 0.5,
                "at": 4,
            }
        )
    )
    w.poll()
    (ck,) = L.checkpoints(led.conn, "a-00000002")
    assert ck["verified"] == 1 and ck["grade"] == "full" and ck["bytes"] == 10 and ck["step"] == 2
    w.close()

    # a restarted runner picks up at the ledger's offset: nothing counted twice
    with open(metrics, "a") as f:
        f.write('{"t": 5, "step": 3, "loss": NaN}\n')
    w2 = RunWatch(
        led, led.run(run["id"]), root=tmp_path, metrics_regex=None, checkpoint_glob=None, offset=prog["offset"]
    )
    (run_dir / "verdict.json").write_text(
        json.dumps(
            {
                "attempt": 1,
                "kind": "nonfinite",
                "metric": "loss",
                "value": float("nan"),
                "step": 3,
                "at": 5,
                "reason": "loss is nan at step 3",
            }
        )
    )
    (run_dir / "exit.json").write_text(
        json.dumps({"attempt": 1, "returncode": None, "signal": 15, "killed_by": "rule", "ended_at": 6})
    )
    state, reason, _ = w2.finish()
    assert (state, reason) == ("stopped", "loss is nan at step 3")
    prog = L.progress(led.conn)["a-00000002"]
    assert prog["lines"] == 3 and prog["last_step"] == 3
    assert math.isnan(L.metric_last(led.conn)["a-00000002"]["loss"]["value"])
    row = led.run("a-00000002")
    assert (row.stop_rule, row.stop_value, row.stop_step) == ("nonfinite", "nan", 3)
    w2.close()
    led.close()


def test_state_paths_from_a_campaign_a_folder_or_a_file(tmp_path):
    from pathlib import Path

    from runner.campaign.statedir import paths_for

    write_campaign(tmp_path, [{"name": "a"}], phase=[])
    want = tmp_path / ".campaign" / "runner.sock"
    for target in (
        load_campaign(tmp_path),
        tmp_path,
        str(tmp_path),
        tmp_path / "campaign.toml",
        str(tmp_path / "campaign.toml"),
    ):
        assert paths_for(target).socket == want, target
    assert isinstance(paths_for(Path(tmp_path)).root, Path)


def test_metric_fold_keeps_the_step_of_sparse_metrics_and_ignores_bad_counts(tmp_path):
    led = L.Ledger(tmp_path / "l.sqlite")
    led.insert_run(
        {
            "id": "a-1",
            "variant": "a",
            "category": "essential",
            "config_hash": "1",
            "state": "running",
            "run_dir": str(tmp_path),
            "planned_hours": 1,
        }
    )
    rows = [
        {"t": 1.0, "step": 1, "loss": 3.0, "dev_acc": 0.4, "samples": 10, "truncated": 1},
        {"t": 2.0, "step": 2, "loss": 2.0, "samples": "ten", "truncated": float("nan")},
        {"t": 3.0, "step": 3, "loss": 1.0, "note": "text is not a metric", "samples": 5},
    ]
    led.record_metrics("a-1", rows, offset=1, bad_lines=0, restarts=0)
    last = L.metric_last(led.conn)["a-1"]
    assert last["dev_acc"] == {"value": 0.4, "step": 1, "t": 1.0}
    assert last["loss"]["step"] == 3 and "note" not in last
    prog = L.progress(led.conn)["a-1"]
    assert (prog["samples"], prog["truncated"], prog["lines"]) == (15, 1, 3)
    assert prog["step_rate"] == 1.0
    led.close()
