"""A tiny training loop the resume tests run as a real process (straight, killed, resumed).

It uses every source of state an exact resume needs: dropout (torch RNG), Python's and NumPy's
RNGs (noise added to inputs), Adam's moments, optionally a scheduler and a GradScaler, and either
batches drawn from the global RNG or a shuffled DataLoader resumed mid-epoch.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
import torch

from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer, resumable_loader


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--mode", choices=["plain", "sched", "loader"], default="plain")
    ap.add_argument("--checkpoint-at", type=int, default=None)
    ap.add_argument("--pause-after-checkpoint", action="store_true")
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--every", type=float, default=1e9)
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--inline", action="store_true", help="serialise in the loop (no background snapshot)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    gen = torch.Generator().manual_seed(123)
    xs = torch.randn(50, 8, generator=gen)
    ys = (xs.sum(dim=1) > 0).long()

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = scaler = loader = None
    if args.mode == "sched":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.8)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=4)
    if args.mode == "loader":
        loader = resumable_loader(torch.utils.data.TensorDataset(xs, ys), batch_size=8, seed=7)
    ckpt = Checkpointer(
        model,
        opt,
        scheduler=sched,
        scaler=scaler,
        sampler=loader.sampler if loader is not None else None,
        every_s=args.every,
        keep=args.keep,
        background=not args.inline,
    )
    restored = ckpt.restore()
    step = restored.step if restored else 0

    def batches():
        if loader is None:
            while True:
                idx = torch.randint(0, 50, (8,))
                yield xs[idx], ys[idx]
        while True:
            yield from loader

    for x, y in batches():
        if step >= args.steps:
            break
        noise = random.gauss(0.0, 0.01) + float(np.random.normal(0.0, 0.01))
        loss = torch.nn.functional.cross_entropy(model(x + noise), y)
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if sched is not None:
            sched.step()
        if loader is not None:
            loader.sampler.advance(len(y))
        step += 1
        metrics.report(step, loss=loss.item(), samples=len(y), truncated=0)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step == args.checkpoint_at:
            ckpt.save(step)
            ckpt.wait()
            if args.pause_after_checkpoint:
                while True:  # wait here to be killed
                    time.sleep(0.05)
        else:
            ckpt.maybe_save(step)
        if ckpt.should_stop:
            ckpt.exit()
    if args.out:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, args.out)
    ckpt.save_final(step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
