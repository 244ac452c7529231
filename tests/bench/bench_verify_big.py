"""Benchmark: verifying a big checkpoint costs bounded memory and about one read of the file.

    python tests/bench/bench_verify_big.py [--gb 4] [--dir /tmp] [--format safetensors|pt|campaign|all] [--repeat 2]

Writes a checkpoint of `--gb` GB of float32 weights (tensors of 256 MB): a safetensors file, a
torch zip (`.pt`, a bare state_dict), or the project's own format (`campaign`: a `.pt` with its
sidecar, so the grader also checks the sha256). It is then graded in a fresh process
(`python -m runner.grading.checkpoint_grade PATH --json`, what the supervisor, `verify` and
`campaign checkpoint` run), `--repeat` times, each against one plain read of the file
(`cat`-like, 8 MB reads) measured just before it and just after it (their mean), since the speed
of a shared disk drifts.

Times: the check's own time is the grader's `verify_seconds` (torch imported before its clock
starts, as the supervisor reports it). The interpreter's start with torch's import is measured on
its own (a fresh `python -c "import torch"`, warm) and printed beside the whole child's time.
Memory: the peak RSS is the child's `VmHWM` (reset at exec, so the parent's memory is not counted),
torch's import included.

The page cache: before each cold pass (the plain read, and the grading) the file is fsync'd and
its pages evicted with `posix_fadvise(POSIX_FADV_DONTNEED)` (no root needed), so each starts with
none of the file in memory; the warm figures follow with the file left in the cache.
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


def import_seconds() -> float:
    """A fresh interpreter importing torch (the part of the grader's process before its clock)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    return time.perf_counter() - t0


def write_own(path: Path, gb: float) -> None:
    """The project's own format: the state dict campaign_train.checkpoint writes, and its sidecar."""
    from campaign_train.formats import FORMAT, sha256_file, sidecar_path

    n = max(1, int(gb * 1024 / TENSOR_MB))
    model = {f"layer{i}.weight": torch.full((TENSOR_MB << 18,), 0.5) for i in range(n)}
    torch.save({"format": FORMAT, "model": model, "progress": {"step": 1}, "holds": ["model", "progress"]}, path)
    del model
    meta = {"format": FORMAT, "step": 1, "holds": ["model", "progress"], "bytes": path.stat().st_size}
    meta["sha256"] = sha256_file(path)
    sidecar_path(path).write_text(json.dumps(meta))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--format", default="all", choices=["safetensors", "pt", "campaign", "all"])
    ap.add_argument("--repeat", type=int, default=2)
    ns = ap.parse_args()
    formats = ["safetensors", "pt", "campaign"] if ns.format == "all" else [ns.format]
    imp = min(import_seconds() for _ in range(2))
    print(f"a fresh interpreter importing torch: {imp:.2f} s (warm; the grader's start before its clock)")
    for fmt in formats:
        path = Path(ns.dir) / f"bench_verify_big.{'safetensors' if fmt == 'safetensors' else 'pt'}"
        print(f"{fmt}: writing {ns.gb:g} GB to {path} ...", flush=True)
        if fmt == "campaign":
            write_own(path, ns.gb)
        else:
            write(path, ns.gb, fmt)
        size = path.stat().st_size
        try:
            ratios, rsss = [], []
            for i in range(ns.repeat):
                evict(path)
                before = read_once(path)
                evict(path)
                wall, rss, res = grade(path)
                evict(path)
                after = read_once(path)
                cold_read = (before + after) / 2  # the shared disk's speed drifts: read on both sides
                check = res["verify_seconds"]
                ratios.append(check / cold_read)
                rsss.append(rss)
                print(
                    f"  [{i + 1}] size {size / 1e9:.2f} GB, verified {res['verified']} grade {res['grade']}; "
                    f"cold read {before:.2f} s before, {after:.2f} s after ({size / cold_read / 1e6:.0f} MB/s); "
                    f"cold check {check:.2f} s ({check / cold_read:.2f}x); whole process {wall:.2f} s; "
                    f"peak RSS {rss:.0f} MB ({rss * 1e6 / size * 100:.1f} %)",
                    flush=True,
                )
            read_once(path)
            warm_read = read_once(path)
            _, _, warm = grade(path)
            print(
                f"  warm: one read {warm_read:.2f} s ({size / warm_read / 1e6:.0f} MB/s); "
                f"check {warm['verify_seconds']:.2f} s ({warm['verify_seconds'] / warm_read:.2f}x)"
            )
            print(
                f"  cold check / cold read: {', '.join(f'{r:.2f}x' for r in ratios)} (goal <= 1.5x); "
                f"peak RSS {max(rsss):.0f} MB = {max(rsss) * 1e6 / size * 100:.1f} % of the file (goal < 25 %)"
            )
            print("  page cache: fsync + posix_fadvise(DONTNEED) before each cold read and each cold check", flush=True)
        finally:
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
