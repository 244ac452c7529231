"""Grading checkpoints in a fresh process: ours (damaged or not) and files from other programs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers_training import ROOT, env_for, training_run_dir  # noqa: F401 (fixture)

from campaign_train.checkpoint import Checkpointer, ResumableSampler
from runner.grading.checkpoint_grade import grade_path, verify_in_subprocess


def _train_two_checkpoints(folder):
    """Two real checkpoints of a tiny loop (steps 1 and 2) with every part."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    sampler = ResumableSampler(10, seed=1)
    ck = Checkpointer(model, opt, scheduler=sched, sampler=sampler, directory=folder, install_signals=False)
    for step in (1, 2):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        sched.step()
        sampler.advance(3)
        ck.save(step)
        ck.wait()
    return folder / "ckpt-000000001.pt", folder / "ckpt-000000002.pt"


def test_own_checkpoint_is_verified_full_in_a_new_process(tmp_path):
    _good, last = _train_two_checkpoints(tmp_path)
    res = verify_in_subprocess(last, timeout=300)
    assert res["verified"] is True, res
    assert res["grade"] == "full" and res["format"] == "campaign" and res["step"] == 2
    assert res["holds"] == ["model", "optimizer", "scheduler", "progress", "rng", "data"]
    assert res["problems"] == []
    assert res["bytes"] == last.stat().st_size and res["verify_seconds"] >= 0


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("truncate", "truncated or rewritten"),
        ("empty", "empty (0 bytes)"),
        ("tamper", "sha256 does not match"),
        ("no_sidecar", "sidecar is missing"),
    ],
)
def test_damaged_checkpoint_is_not_verified_and_the_previous_one_survives(tmp_path, damage, reason):
    good, last = _train_two_checkpoints(tmp_path)
    data = last.read_bytes()
    if damage == "truncate":
        last.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        last.write_bytes(b"")
    elif damage == "tamper":  # same size, one byte flipped inside the tensor data
        i = len(data) // 2
        last.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
    else:
        last.with_suffix(".json").unlink()
    res = verify_in_subprocess(last, timeout=300)
    assert res["verified"] is False
    assert any(reason in p for p in res["problems"]), res["problems"]
    # The previous good checkpoint is untouched and still verifies.
    assert good.exists() and good.with_suffix(".json").exists()
    assert grade_path(good)["verified"] is True


def test_diverged_weights_are_not_a_resume_point(tmp_path):
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    ck = Checkpointer(model, torch.optim.SGD(model.parameters(), lr=1.0), directory=tmp_path, install_signals=False)
    path = ck.save(7)
    ck.wait()
    res = grade_path(path)
    assert res["verified"] is False and "non-finite" in res["problems"][0] and "weight" in res["problems"][0]


def test_foreign_files_are_graded_from_what_they_hold(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    torch.save(model.state_dict(), tmp_path / "plain.pt")
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "model_args": {"n_layer": 1},
            "iter_num": 500,
            "best_val_loss": torch.tensor(1.5),
            "config": {"lr": 1e-3},
        },
        tmp_path / "nano.pt",
    )
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "step": 9,
            "rng_state": torch.get_rng_state(),
            "sampler": {"index": 4},
        },
        tmp_path / "fullish.pt",
    )
    torch.save(
        {"net": model.state_dict(), "opt": {"state": {5: {}}, "param_groups": [{"params": [0, 1]}]}},
        tmp_path / "badopt.pt",
    )
    torch.save(
        {
            "state_dict": model.state_dict(),
            "optimizer_states": [opt.state_dict()],
            "global_step": 40,
            "epoch": 2,
            "lr_schedulers": [{"last_epoch": 2}],
            "loops": {"fit_loop": {"batch": 3}},
        },
        tmp_path / "lightning.ckpt",
    )
    torch.save([1, 2, 3], tmp_path / "list.pt")
    (tmp_path / "noise.pt").write_bytes(os.urandom(4096))

    plain = grade_path(tmp_path / "plain.pt")
    assert (plain["verified"], plain["grade"], plain["holds"]) == (True, "weights", ["model"])
    nano = grade_path(tmp_path / "nano.pt")
    assert nano["grade"] == "weights+optimizer" and nano["holds"] == ["model", "optimizer", "progress"]
    assert nano["step"] == 500 and nano["verified"] is True
    assert any("random-number" in p for p in nano["problems"]) and any("data position" in p for p in nano["problems"])
    fullish = grade_path(tmp_path / "fullish.pt")
    assert fullish["grade"] == "full" and fullish["holds"] == ["model", "optimizer", "progress", "rng", "data"]
    lightning = grade_path(tmp_path / "lightning.ckpt")
    # `loops` is Lightning's bookkeeping, not a data position: a plain DataLoader restarts its epoch
    assert lightning["holds"] == ["model", "optimizer", "scheduler", "progress"]
    assert lightning["format"] == "lightning" and any("Lightning restarts" in p for p in lightning["problems"])
    assert lightning["grade"] == "weights+optimizer" and lightning["step"] == 40  # no RNG states
    bad = grade_path(tmp_path / "badopt.pt")
    assert bad["grade"] == "weights" and any("no param group holds" in p for p in bad["problems"])
    assert bad["verified"] is False
    lst = grade_path(tmp_path / "list.pt")
    assert lst["grade"] == "unreadable" and lst["verified"] is False
    noise = grade_path(tmp_path / "noise.pt")
    assert noise["grade"] == "unreadable" and noise["problems"][0].startswith("does not load")


def test_foreign_pickle_with_arbitrary_objects_is_refused_not_executed(tmp_path):
    import argparse

    torch.save(
        {"model": torch.nn.Linear(2, 2).state_dict(), "args": argparse.Namespace(lr=1e-3)}, tmp_path / "pickled.pt"
    )
    res = grade_path(tmp_path / "pickled.pt")
    assert res["verified"] is False and res["grade"] == "unreadable"
    assert "weights_only=True" in res["problems"][0]


def test_hugging_face_trainer_folder(tmp_path):
    import struct

    folder = tmp_path / "checkpoint-300"
    folder.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    torch.save({"last_epoch": 3}, folder / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 300}))
    res = grade_path(folder)
    assert res["format"] == "hf-trainer" and res["grade"] == "full" and res["step"] == 300 and res["verified"]
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    res = grade_path(folder)
    assert res["verified"] is False and any("outside the file" in p for p in res["problems"])


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "runner", "checkpoint", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_for(ROOT / "unused"),
        cwd=ROOT,
    )


def test_cli_exit_codes_and_json(tmp_path):
    good, last = _train_two_checkpoints(tmp_path)
    r = _cli(str(good), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"verified", "grade", "holds", "problems"} <= set(out) and out["verified"] is True
    last.write_bytes(last.read_bytes()[:100])
    r = _cli(str(last))
    assert r.returncode == 1 and "NOT verified" in r.stdout and "truncated" in r.stdout
    r = _cli(str(tmp_path / "missing.pt"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "runner.grading.checkpoint_grade", str(good), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0 and json.loads(r.stdout.strip().splitlines()[-1])["grade"] == "full"
