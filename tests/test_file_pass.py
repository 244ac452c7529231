"""The single pass over a checkpoint file (runner.grading.file_pass): the same sha256 as hashing the
file alone, and every NaN/inf found wherever it lies, the last chunk and chunk boundaries included.

Real files on disk, real torch saves and safetensors files; chunks made small so a file of a few MB
spans many of them.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os

import pytest
import torch

from runner.grading import file_pass
from runner.grading.checkpoint_grade import grade_path
from runner.grading.result import FORMAT

CHUNK = 4 * mmap.PAGESIZE


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _own_checkpoint(path, model):
    """A campaign-format checkpoint with its sidecar, as campaign_train.checkpoint writes it."""
    torch.save({"format": FORMAT, "model": model, "progress": {"step": 7}, "holds": ["model", "progress"]}, path)
    side = {"format": FORMAT, "step": 7, "holds": ["model", "progress"], "bytes": path.stat().st_size}
    side["sha256"] = _sha(path)
    path.with_suffix(".json").write_text(json.dumps(side))


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(file_pass, "CHUNK_BYTES", CHUNK)


def test_one_pass_gives_the_files_sha256_and_finds_a_nan_in_the_last_chunk(tmp_path, small_chunks):
    model = {f"w{i}": torch.randn(50_000) for i in range(4)}
    model["w3"][-1] = float("nan")  # the very last element of the file's tensor data
    path = tmp_path / "ckpt.pt"
    _own_checkpoint(path, model)
    assert path.stat().st_size > 20 * CHUNK
    loaded = torch.load(path, mmap=True, weights_only=True)
    by_file, rest = file_pass.locate(loaded["model"])  # every tensor found in the mapped file
    assert rest == {} and list(by_file) == [os.path.realpath(path)]
    nan_at = next(r.start + r.nbytes - 4 for r in by_file[os.path.realpath(path)] if r.name == "w3")
    assert nan_at // CHUNK == (path.stat().st_size - 1) // CHUNK  # the NaN lies in the file's last chunk
    res = file_pass.scan_tensors(loaded["model"], sha256_of=path)
    assert res.sha256 == _sha(path)
    assert res.nonfinite == ["w3"]
    assert res.bytes_read == path.stat().st_size  # the file was read once, whole

    graded = grade_path(path)  # the grader: sha256 against the sidecar and the values, same pass
    assert graded["verified"] is False
    assert not any("sha256" in p for p in graded["problems"]), graded["problems"]
    assert any("non-finite values (NaN or inf) in 1 tensor(s): w3" in p for p in graded["problems"])


def test_a_changed_byte_is_still_a_sha256_mismatch(tmp_path, small_chunks):
    path = tmp_path / "ckpt.pt"
    _own_checkpoint(path, {"w": torch.ones(100_000)})
    data = bytearray(path.read_bytes())
    i = data.rindex(b"\x00\x00\x80\x3f")  # a float32 1.0 near the end: still finite, other bytes
    data[i + 2] = 0x70
    path.write_bytes(bytes(data))
    graded = grade_path(path)
    assert graded["verified"] is False
    assert any("sha256 does not match the sidecar" in p for p in graded["problems"])


def _safetensors_by_hand(path, tensors):
    """A safetensors file with the tensors in the order given and no padding: tensors after a
    3-byte one start at odd offsets (the library itself would align them)."""
    names = {torch.uint8: "U8", torch.float32: "F32", torch.float16: "F16"}
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        blob = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    head = json.dumps(header).encode()
    path.write_bytes(len(head).to_bytes(8, "little") + head + b"".join(blobs))
    return 8 + len(head)


@pytest.mark.parametrize("where", ["first", "boundary", "last"])
def test_unaligned_safetensors_tensors_across_chunk_boundaries(tmp_path, small_chunks, where):
    """Tensors starting at odd offsets, straddling chunks: an inf anywhere in them is found."""
    tensors = {"a": torch.zeros(3, dtype=torch.uint8), "b": torch.randn(40_000), "c": torch.randn(9_000).half()}
    path = tmp_path / "m.safetensors"
    base = _safetensors_by_hand(path, tensors)
    start_b = base + 3
    if start_b % 4 == 0:  # keep b unaligned whatever the header's length
        tensors = {"a": torch.zeros(2, dtype=torch.uint8), **{k: v for k, v in tensors.items() if k != "a"}}
        base = _safetensors_by_hand(path, tensors)
        start_b = base + 2
    assert start_b % 4 != 0
    assert grade_path(path)["verified"] is True
    index = {"first": 0, "boundary": (CHUNK * 2 - start_b) // 4, "last": 39_999}[where]
    tensors["b"][index] = float("inf")
    _safetensors_by_hand(path, tensors)
    graded = grade_path(path)
    assert graded["verified"] is False
    assert any("in 1 tensor(s): b" in p for p in graded["problems"]), graded["problems"]
    regions = [file_pass.Region("b", start_b, 160_000, torch.float32)]
    assert file_pass.read_once(path, regions, sha256=True).sha256 == _sha(path)


def test_a_nan_straddling_a_chunk_edge_in_an_unaligned_region(tmp_path):
    """A float32 whose bytes lie partly in one chunk and partly in the next."""
    raw = bytearray(b"\x01" + torch.ones(3 * CHUNK // 4).numpy().tobytes())  # the region starts at byte 1
    k = (CHUNK - 1) // 4  # element k: bytes CHUNK-3 .. CHUNK, across the first chunk's edge
    assert 1 + 4 * k < CHUNK < 1 + 4 * k + 4
    raw[1 + 4 * k : 5 + 4 * k] = torch.tensor([float("nan")]).numpy().tobytes()
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(raw))
    region = file_pass.Region("x", 1, len(raw) - 1, torch.float32)
    res = file_pass.read_once(path, [region], sha256=True, chunk=CHUNK)
    assert res.nonfinite == ["x"] and res.sha256 == _sha(path)
    raw[1 + 4 * k : 5 + 4 * k] = torch.tensor([2.0]).numpy().tobytes()
    path.write_bytes(bytes(raw))
    assert file_pass.read_once(path, [region], chunk=CHUNK).nonfinite == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64])
def test_finite_is_exact_for_each_float_dtype(dtype):
    big = torch.full((1000,), 60000.0 if dtype == torch.float16 else 3e38, dtype=dtype)
    assert file_pass.finite(big)  # the sum overflows; the values are finite: settled one by one
    for bad in (float("nan"), float("inf"), float("-inf")):
        t = torch.zeros(1000, dtype=dtype)
        t[-1] = bad
        assert not file_pass.finite(t)
    if dtype == torch.complex64:
        t = torch.zeros(10, dtype=dtype)
        t[3] = complex(0.0, float("nan"))
        assert not file_pass.finite(t)


def test_float8_values_are_checked_widened():
    f8 = getattr(torch, "float8_e5m2", None)
    if f8 is None:
        pytest.skip("this torch has no float8")
    t = torch.zeros(100).to(f8)
    assert file_pass.finite(t)
    t = torch.tensor([0.0, float("inf")]).to(f8)
    assert not file_pass.finite(t)


RSS_PROBE = """
import sys
import torch
from runner.grading.checkpoint_grade import grade_path

def kb(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))

base = kb("VmRSS:")
res = grade_path(sys.argv[1])
print(res["verified"], (kb("VmHWM:") - base) // 1024)
"""


def test_a_file_many_chunks_long_costs_about_a_chunk_of_memory(tmp_path):
    """A 168 MB checkpoint, hashed and scanned in a fresh process: the pages of each checked chunk
    are handed back, so the peak grows by about one chunk (32 MB), not by the file."""
    import subprocess
    import sys

    from runner.grading.client import grader_env

    path = tmp_path / "big.pt"
    _own_checkpoint(path, {f"w{i}": torch.full((10 << 20,), 0.5) for i in range(4)})
    assert path.stat().st_size > 160e6
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(path)], capture_output=True, text=True, env=grader_env(), timeout=300
    )
    assert out.returncode == 0, out.stderr
    verified, grown_mb = out.stdout.split()
    assert verified == "True"
    assert int(grown_mb) < 80, f"the grader's peak grew by {grown_mb} MB for a 168 MB file"
