"""Benchmark: the training stall of one checkpoint against a plain `torch.save` of the same state,
the time until it is durable, and the time to verify it in a new process. Prints figures.

    python tests/bench/bench_checkpoint.py [--mb 200] [--repeat 3] [--dir /tmp]

The model's weights are at least `--mb` MB (float32); with Adam's two moments the full state is
about three times that. The stall is what the training loop waits for (`Checkpointer.save`
returning); fsync, sha256, rename, sidecar and pruning then run in a background thread, reported
as "durable after". The plain baseline is `torch.save(state, path)` with no fsync at all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from campaign_train.checkpoint import Checkpointer, rng_state  # noqa: E402
from runner.grading.checkpoint_grade import verify_in_subprocess  # noqa: E402


def build(mb: float, device: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    width = 2048
    layers = max(1, int(mb * 1e6 / 4 / (width * width)) + 1)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randn(4, width, device=device)).sum().backward()
    opt.step()
    return model, opt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    ap.add_argument("--device", default="cpu", help="where the model lives (cuda: the stall includes the copy to host)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, opt = build(args.mb, args.device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        os.environ["CAMPAIGN_RUN_DIR"] = str(folder / "run")
        os.environ.pop("CAMPAIGN_CHECKPOINT_EVERY", None)
        sampler_state = {"epoch": 0, "consumed": 123}

        def plain_state() -> dict:
            return {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "progress": {"step": 1, "epoch": 0},
                "rng": rng_state(),
                "data": sampler_state,
            }

        background = Checkpointer(model, opt, keep=2, install_signals=False, directory=folder / "bg")
        inline = Checkpointer(model, opt, keep=2, install_signals=False, directory=folder / "inline", background=False)
        plain, plain_fsync, stall, durable, stall_inline = [], [], [], [], []
        last = None
        for i in range(args.repeat):  # interleaved, so a busy moment hits every kind alike
            p = folder / f"plain-{i}.pt"
            t0 = time.perf_counter()
            torch.save(plain_state(), p)
            plain.append(time.perf_counter() - t0)
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            plain_fsync.append(time.perf_counter() - t0)
            size = p.stat().st_size
            p.unlink()

            t0 = time.perf_counter()
            last = background.save(i + 1, data_state=sampler_state)
            stall.append(time.perf_counter() - t0)
            background.wait()
            durable.append(time.perf_counter() - t0)

            t0 = time.perf_counter()
            inline.save(i + 1, data_state=sampler_state)
            stall_inline.append(time.perf_counter() - t0)
            inline.wait()

        t0 = time.perf_counter()
        res = verify_in_subprocess(last, timeout=900)
        verify_wall = time.perf_counter() - t0

    med = statistics.median
    print(f"weights {weights / 1e6:.0f} MB, checkpoint file {size / 1e6:.0f} MB (model + Adam + rng + data)")
    print(f"plain torch.save:            median {med(plain):.3f} s  (runs: {', '.join(f'{x:.3f}' for x in plain)})")
    print(f"plain torch.save + fsync:    median {med(plain_fsync):.3f} s")
    print(f"Checkpointer.save stall:     median {med(stall):.3f} s  (runs: {', '.join(f'{x:.3f}' for x in stall)})")
    print(
        f"stall ratio to plain save:   {med(stall) / med(plain):.3f} of medians, "
        f"{min(stall) / min(plain):.3f} of the fastest runs  (goal <= 1.1)"
    )
    print(
        f"inline save (no copy) stall: median {med(stall_inline):.3f} s, ratio {med(stall_inline) / med(plain):.3f}"
        f" of medians, {min(stall_inline) / min(plain):.3f} of the fastest runs"
        f"  (used when a second host copy would not fit in memory)"
    )
    print(f"durable (renamed, sidecar):  median {med(durable):.3f} s after the save began")
    print(
        f"verify in a new process:     {verify_wall:.2f} s wall ({res.get('verify_seconds')} s loading and checking)"
        f" -> verified={res['verified']} grade={res['grade']}"
    )
    rate = metrics_rate()
    print(f"campaign_train.metrics.report:       {rate:,.0f} calls/s ({1e6 / rate:.1f} us a call)")
    return 0 if res["verified"] else 1


def metrics_rate(n: int = 100_000) -> float:
    from campaign_train import metrics

    t0 = time.perf_counter()
    for i in range(n):
        metrics.report(i, loss=0.5, dev_acc=0.1, truncated=1, samples=32)
    return n / (time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
