"""DeepSpeed checkpoints as DeepSpeed 0.19.8 wrote them (ZeRO stages 0, 2 and 3; see
tests/fixtures/deepspeed/make_checkpoints.py), graded the way the supervisor and `campaign checkpoint`
grade them: in a fresh interpreter, weights_only, DeepSpeed's bookkeeping records read into inert
stand-ins (DeepSpeed is not installed here)."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from runner.grading.client import verify_many

FIXTURES = Path(__file__).parent / "fixtures" / "deepspeed"
PARAMS = 8 * 16 + 16 + 16 * 1 + 1  # the tiny MLP's parameters


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_deepspeed_checkpoint_holds_weights_optimizer_and_step(stage):
    folder = FIXTURES / f"zero{stage}"
    (res,) = verify_many([folder])
    assert res["format"] == "deepspeed" and res["verified"] is True, res
    assert res["step"] == 3 and {"model", "optimizer", "progress"} <= set(res["holds"]), res
    assert not any("does not load" in p for p in res["problems"]), res


def test_a_nan_in_the_zero3_master_weights_is_named(tmp_path):
    folder = shutil.copytree(FIXTURES / "zero3", tmp_path / "zero3")
    shard = folder / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    with zipfile.ZipFile(shard) as z:  # the fp32 group and Adam's two moments: one float each
        entries = [(i.header_offset, i.file_size) for i in z.infolist() if "/data/" in i.filename]
    with open(shard, "r+b") as fh:
        for offset, size in entries:
            if size == PARAMS * 4:
                fh.seek(offset)
                name_len, extra_len = struct.unpack("<HH", fh.read(30)[26:30])
                fh.seek(offset + 30 + name_len + extra_len)
                fh.write(struct.pack("<f", float("nan")))
    (res,) = verify_many([folder])
    assert res["verified"] is False, res
    assert any("fp32 master weights" in p and "non-finite" in p for p in res["problems"]), res


def test_a_missing_zero_partition_file_is_not_weights(tmp_path):
    folder = shutil.copytree(FIXTURES / "zero3", tmp_path / "zero3")
    (folder / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    (res,) = verify_many([folder])
    assert res["verified"] is False and any("placeholder" in p for p in res["problems"]), res
