"""Benchmark: verifying a big checkpoint costs bounded memory and about one read of the file.

    python tests/bench/bench_verify_big.py [--gb 4] [--dir /tmp] [--format safetensors|pt|both]

Writes a checkpoint of `--gb` GB of float32 weights (tensors of 256 MB), then grades it in a fresh
process (`python -m runner.grading.checkpoint_grade PATH --json`, what the supervisor, `verify` and
`campaign checkpoint` run) and reports the grader's peak RSS (`ru_maxrss` of the child) and its wall
time, against the time of one plain read of the file (`cat`-like, 8 MB reads). The check's own time
is the grader's `verify_seconds` (torch imported before its clock starts, as the supervisor reports
it); the whole child's time, torch's import included, is printed beside it. The peak RSS is the
child's `VmHWM` (reset at exec, so the parent's memory is not counted), torch's import included.

The page cache: before each timed pass the file's pages are evicted with
`posix_fadvise(POSIX_FADV_DONTNEED)` (no root needed), so both the read and the verification start
cold; a warm figure (file left in the cache) is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TENSOR_MB = 256


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_once(path: Path) -> float:
    buf = bytearray(8 << 20)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - t0


def write(path: Path, gb: float, fmt: str) -> None:
    n = max(1, int(gb * 1024 / TENSOR_MB))
    tensors = {f"layer{i}.weight": torch.full((TENSOR_MB << 18,), 0.5) for i in range(n)}
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(tensors, path)
    else:
        torch.save(tensors, path)


WRAPPER = """
import runpy, sys
sys.argv = ["checkpoint_grade", sys.argv[1], "--json"]
try:
    runpy.run_module("runner.grading.checkpoint_grade", run_name="__main__")
except SystemExit:
    pass
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print("HWM_KB", hwm, file=sys.stderr)
"""


def grade(path: Path) -> tuple[float, float, dict]:
    """(wall seconds of the whole child, its peak RSS in MB (VmHWM, reset at exec), its answer)"""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'runner' / 'training_api'}")
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(path)], capture_output=True, text=True, env=env, timeout=3600
    )
    wall = time.perf_counter() - t0
    hwm = next(int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("HWM_KB"))
    return wall, hwm / 1024, json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--format", default="both", choices=["safetensors", "pt", "both"])
    ns = ap.parse_args()
    formats = ["safetensors", "pt"] if ns.format == "both" else [ns.format]
    for fmt in formats:
        path = Path(ns.dir) / f"bench_verify_big.{'safetensors' if fmt == 'safetensors' else 'pt'}"
        print(f"{fmt}: writing {ns.gb:g} GB to {path} ...", flush=True)
        write(path, ns.gb, fmt)
        size = path.stat().st_size
        try:
            evict(path)
            cold_read = read_once(path)
            evict(path)
            wall, rss, res = grade(path)
            warm_read = read_once(path)
            warm_wall, _, _ = grade(path)
            check = res["verify_seconds"]
            print(f"  size {size / 1e9:.2f} GB; verified {res['verified']} grade {res['grade']}")
            print(
                f"  one cold read {cold_read:.2f} s; cold check {check:.2f} s ({check / cold_read:.2f}x), "
                f"whole process with torch's import {wall:.2f} s"
            )
            print(
                f"  one warm read {warm_read:.2f} s; warm verification {warm_wall:.2f} s ({warm_wall / warm_read:.2f}x)"
            )
            print(f"  grader peak RSS {rss:.0f} MB = {rss * 1e6 / size * 100:.1f} % of the file (goal < 25 %)")
            print("  page cache: evicted with posix_fadvise(DONTNEED) before the cold passes", flush=True)
        finally:
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
