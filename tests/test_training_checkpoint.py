"""Full-state checkpoints: bitwise-exact resume after SIGKILL, signals, keep-last-N, the sidecar."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from helpers_training import checkpoint_event, kill_hard, read_lines, run_loop, start_loop, training_run_dir, wait_for  # noqa: F401

pytestmark = pytest.mark.slow

N = 24


def _final(path):
    return torch.load(path, weights_only=True)


def _assert_bitwise_equal(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_bitwise_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_bitwise_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("mode", ["plain", "sched", "loader"])
def test_resume_after_sigkill_is_bitwise_equal(tmp_path, mode):
    extra = ("--inline",) if mode == "sched" else ()  # one case serialises in the loop
    straight_dir, broken_dir = tmp_path / "straight", tmp_path / "broken"
    r = run_loop(straight_dir, "--steps", str(N), "--mode", mode, "--out", str(tmp_path / "a.pt"), *extra)
    assert r.returncode == 0, r.stderr

    half = N // 2 + 1  # with 50 samples and batches of 8, step 13 is mid-epoch
    proc = start_loop(
        broken_dir, "--steps", str(N), "--mode", mode, "--checkpoint-at", str(half), "--pause-after-checkpoint", *extra
    )
    try:
        event = wait_for(lambda: checkpoint_event(broken_dir, half), "the checkpoint event", proc=proc)
    finally:
        kill_hard(proc)
    assert proc.returncode == -signal.SIGKILL
    assert (broken_dir / "checkpoints" / f"ckpt-{half:09d}.pt").exists()

    r = run_loop(
        broken_dir,
        "--steps",
        str(N),
        "--mode",
        mode,
        "--out",
        str(tmp_path / "b.pt"),
        *extra,
        CAMPAIGN_RESUME_FROM=event["path"],
        CAMPAIGN_ATTEMPT="2",
    )
    assert r.returncode == 0, r.stderr
    a, b = _final(tmp_path / "a.pt"), _final(tmp_path / "b.pt")
    assert a["step"] == b["step"] == N
    _assert_bitwise_equal(a["model"], b["model"], "model")
    _assert_bitwise_equal(a["optimizer"], b["optimizer"], "optimizer")

    starts = [line for line in read_lines(broken_dir / "metrics.jsonl") if line.get("event") == "start"]
    assert [s["resumed_from"] for s in starts] == [None, event["path"]]
    assert starts[1]["attempt"] == 2
    # The resumed attempt reports the steps after the checkpoint, not from zero.
    steps = [line["step"] for line in read_lines(broken_dir / "metrics.jsonl") if "loss" in line]
    assert steps[-(N - half) :] == list(range(half + 1, N + 1))


def test_resume_without_env_takes_latest_complete_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_loop(run_dir, "--steps", "30", "--checkpoint-at", "10", "--pause-after-checkpoint")
    try:
        wait_for(lambda: checkpoint_event(run_dir, 10), "the checkpoint event", proc=proc)
    finally:
        kill_hard(proc)
    ckdir = run_dir / "checkpoints"
    # A save cut short (no sidecar) and a temp file left by a killed save are never resume points.
    (ckdir / "ckpt-000000020.pt").write_bytes(b"partial")
    (ckdir / ".ckpt-000000021.pt.tmp-999").write_bytes(b"partial")
    r = run_loop(run_dir, "--steps", "12")
    assert r.returncode == 0, r.stderr
    starts = [x for x in read_lines(run_dir / "metrics.jsonl") if x.get("event") == "start"]
    assert starts[-1]["resumed_from"].endswith("ckpt-000000010.pt")
    assert not (ckdir / ".ckpt-000000021.pt.tmp-999").exists()


def test_sigterm_saves_and_exits_and_sigusr1_checkpoints(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_loop(run_dir, "--steps", "100000", "--step-sleep", "0.01")
    try:
        wait_for(lambda: any("loss" in x for x in read_lines(run_dir / "metrics.jsonl")), "a metric line", proc=proc)
        proc.send_signal(signal.SIGUSR1)
        first = wait_for(
            lambda: [x for x in read_lines(run_dir / "metrics.jsonl") if x.get("event") == "checkpoint"],
            "the SIGUSR1 checkpoint",
            proc=proc,
        )
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        kill_hard(proc)
    assert proc.returncode == 143
    lines = read_lines(run_dir / "metrics.jsonl")
    events = [x for x in lines if x.get("event") == "checkpoint"]
    assert len(events) == 2 and events[1]["step"] > first[0]["step"]
    assert lines[-1]["event"] == "end" and lines[-1]["status"] == "sigterm"
    last = max(x["step"] for x in lines if "loss" in x)
    assert events[1]["step"] == last  # saved at the step it stopped on
    sidecar = json.loads((run_dir / "checkpoints" / f"ckpt-{last:09d}.json").read_text())
    assert sidecar["format"] == "campaign-checkpoint/1"
    assert sidecar["holds"] == ["model", "optimizer", "progress", "rng"]
    assert sidecar["bytes"] == (run_dir / "checkpoints" / f"ckpt-{last:09d}.pt").stat().st_size
    assert len(sidecar["sha256"]) == 64 and sidecar["final"] is False


def test_keep_last_n_and_final(tmp_path):
    run_dir = tmp_path / "run"
    r = run_loop(run_dir, "--steps", "40", "--every", "0", "--keep", "3")
    assert r.returncode == 0, r.stderr
    ckdir = run_dir / "checkpoints"
    kept = sorted(p.name for p in ckdir.glob("ckpt-*.pt"))
    assert kept == ["ckpt-000000038.pt", "ckpt-000000039.pt", "ckpt-000000040.pt"]
    assert sorted(p.name for p in ckdir.glob("ckpt-*.json")) == [k.replace(".pt", ".json") for k in kept]
    final = json.loads((ckdir / "final.json").read_text())
    assert final["final"] is True and final["step"] == 40
    state = torch.load(ckdir / "final.pt", weights_only=True)
    assert state["progress"]["step"] == 40 and state["format"] == "campaign-checkpoint/1"
    assert not list(ckdir.glob(".*tmp*"))
    lines = read_lines(run_dir / "metrics.jsonl")
    assert sum(1 for x in lines if x.get("event") == "checkpoint") == 41
    assert lines[-1] == {**lines[-1], "event": "end", "status": "ok"}


def test_prune_keeps_newest_verified_checkpoint(tmp_path):
    from campaign_train.checkpoint import Checkpointer

    model = torch.nn.Linear(2, 2)
    ck = Checkpointer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), keep=2, directory=tmp_path, install_signals=False
    )
    ck.save(1)
    ck.wait()
    (tmp_path / "ckpt-000000001.verify.json").write_text(json.dumps({"verified": True}))
    for s in (2, 3, 4):
        ck.save(s)
        ck.wait()
        (tmp_path / f"ckpt-{s:09d}.verify.json").write_text(json.dumps({"verified": False}))
    names = sorted(p.name for p in tmp_path.glob("ckpt-*.pt"))
    assert names == ["ckpt-000000001.pt", "ckpt-000000003.pt", "ckpt-000000004.pt"]


def test_rng_and_sampler_state_round_trip(tmp_path):
    import random

    import numpy as np

    from campaign_train.checkpoint import ResumableSampler, rng_state, set_rng_state

    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    saved = rng_state()
    torch.save(saved, tmp_path / "rng.pt")
    expect = (torch.rand(3), random.random(), np.random.rand())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert torch.equal(torch.rand(3), expect[0]) and random.random() == expect[1]
    assert np.random.rand() == expect[2]

    s = ResumableSampler(10, seed=3)
    full = list(s)
    s.advance(4)
    t = ResumableSampler(10, seed=3)
    t.load_state_dict(s.state_dict())
    assert list(t) == full[4:]
    with pytest.raises(ValueError, match="corpus or seed changed"):
        ResumableSampler(11, seed=3).load_state_dict(s.state_dict())


def test_snapshot_is_a_deep_copy_that_keeps_ties_and_metadata():
    from campaign_train.checkpoint import snapshot

    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight  # tied weights
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    sd = model.state_dict()
    snap = snapshot({"model": sd, "list": [torch.ones(2)], "n": 3})
    assert snap["model"]._metadata == sd._metadata
    assert snap["model"]["emb.weight"] is snap["model"]["head.weight"]
    before = snap["model"]["emb.weight"].clone()
    with torch.no_grad():
        emb.weight.add_(1.0)  # training goes on: the copy must not move
    assert torch.equal(snap["model"]["emb.weight"], before)
    assert snap["n"] == 3 and torch.equal(snap["list"][0], torch.ones(2))


def test_inline_and_background_saves_hold_the_same_state(tmp_path):
    from campaign_train.checkpoint import Checkpointer

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    paths = []
    for background in (True, False):
        state = torch.get_rng_state()
        ck = Checkpointer(
            model, opt, directory=tmp_path / str(background), install_signals=False, background=background
        )
        paths.append(ck.save(5, data_state={"index": 9}))
        ck.wait()
        torch.set_rng_state(state)
    a, b = (torch.load(p, weights_only=True) for p in paths)
    assert json.loads(paths[0].with_suffix(".json").read_text())["save_mode"] == "snapshot"
    assert json.loads(paths[1].with_suffix(".json").read_text())["save_mode"] == "inline"
    _assert_bitwise_equal(a, b)


def test_background_save_failure_is_raised_at_the_next_wait(tmp_path):
    from campaign_train.checkpoint import Checkpointer

    model = torch.nn.Linear(2, 2)
    ck = Checkpointer(model, directory=tmp_path, install_signals=False)
    ck.save(1, extra={"not picklable": lambda: 0})
    with pytest.raises(RuntimeError, match="could not be written"):
        ck.wait()
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.glob(".*tmp*"))
