"""The GPU check: what CI (no GPU) cannot prove, run by hand on a rented or lent GPU host.

    python tests/gpu/check_gpu.py [--steps 40] [--save-at 15]

It prints one line per check and exits 1 if any failed (0 with "skipped" lines on a host without
CUDA or NVML, so it is safe anywhere). What it checks:
1. NVML through the console's own sampler (`console.gpu_sampler.GpuSampler` over
   `runner.daemon.nvml.Nvml`): device count, a sample per GPU, and this process seen among the
   GPU's processes once it holds CUDA memory.
2. A training loop on CUDA with dropout (the CUDA random state) and Adam, saved by
   `campaign_train.checkpoint.Checkpointer` at --save-at, continued to --steps; the checkpoint is
   graded in a new interpreter (`runner.grading.client.verify_in_subprocess`, no GPU visible there),
   and a second process resumes from it: its later losses must equal the straight run's bit for bit.
3. `CUDA_VISIBLE_DEVICES` per slot: the runner's slot plan for this host, and a child process per
   slot that sees exactly the one GPU its slot names.
Not collected by pytest (no `test_` prefix): it needs the hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS: list[tuple[str, str, str]] = []  # (status, check, detail)


def record(status: str, check: str, detail: str = "") -> None:
    RESULTS.append((status, check, detail))
    print(f"{status:7s} {check}" + (f": {detail}" if detail else ""), flush=True)


def check_nvml() -> None:
    from console.gpu_sampler import GpuSampler
    from runner.daemon.nvml import Nvml

    nv = Nvml()
    if not nv.available:
        record("skipped", "NVML", f"not available here ({nv.error})")
        return
    sampler = GpuSampler(nv, process_every=0.0)
    reading = sampler.read({}, ".")
    if reading.error or not reading.gpus:
        record("FAILED", "NVML through the console's sampler", reading.error or "no GPU sampled")
        return
    for g in reading.gpus:
        record("ok", f"NVML GPU {g.index}", json.dumps(g.as_dict(), default=str))
    try:
        import torch

        if torch.cuda.is_available():
            hold = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # 64 MiB, so NVML lists us
            torch.cuda.synchronize()
            reading = sampler.read({"this-check": os.getpid()}, ".")
            ours = [p for p in reading.processes if p.pid == os.getpid()]
            if ours and ours[0].run_id == "this-check":
                record("ok", "NVML process list", f"this process on GPU {ours[0].gpu_index}, mapped to its run")
            elif reading.processes_note:
                record("skipped", "NVML process list", reading.processes_note)
            else:
                record("FAILED", "NVML process list", f"this process not listed: {reading.processes}")
            del hold
    except Exception as exc:  # a check's failure is reported, the next checks still run
        record("FAILED", "NVML process list", repr(exc))


TRAIN = r"""
import json, sys, torch
from campaign_train.checkpoint import Checkpointer

steps, save_at, folder, resume = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "resume"
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                            torch.nn.Linear(64, 4)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ckpt = Checkpointer(model, opt, directory=folder, every_s=1e9, install_signals=False)
step = 0
if resume:
    restored = ckpt.restore()
    step = restored.step if restored else 0
losses = {}
while step < steps:
    x = torch.randn(16, 32, device=dev)          # CUDA random state
    y = torch.randint(0, 4, (16,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)   # dropout: CUDA random state too
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    losses[step] = loss.item().hex()
    if not resume and step == save_at:
        ckpt.save(step); ckpt.wait()
print(json.dumps(losses))
"""


def check_cuda_resume(steps: int, save_at: int) -> None:
    try:
        import torch
    except ImportError:
        record("skipped", "CUDA checkpoint and resume", "torch is not installed here")
        return
    if not torch.cuda.is_available():
        record("skipped", "CUDA checkpoint and resume", "torch sees no CUDA device")
        return
    from runner.grading.client import verify_in_subprocess

    with tempfile.TemporaryDirectory(prefix="campaign-gpu-check-") as tmp:
        folder = Path(tmp) / "checkpoints"

        def run(mode: str) -> dict[str, str]:
            out = subprocess.run(
                [sys.executable, "-c", TRAIN, str(steps), str(save_at), str(folder), mode],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
            )
            if out.returncode != 0:
                raise RuntimeError(
                    out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
                )
            return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}  # type: ignore[misc]

        try:
            straight = run("straight")
        except Exception as exc:
            record("FAILED", "CUDA training with a checkpoint", repr(exc))
            return
        saved = sorted(folder.glob("ckpt-*.pt"))
        if not saved:
            record("FAILED", "CUDA checkpoint saved", f"nothing in {folder}")
            return
        record("ok", "CUDA checkpoint saved", f"{saved[-1].name}, {saved[-1].stat().st_size} bytes")
        graded = verify_in_subprocess(saved[-1])
        status = "ok" if graded.get("verified") else "FAILED"
        record(
            status,
            "verified in a new process without a GPU",
            f"grade {graded.get('grade')}, holds {graded.get('holds')}, problems {graded.get('problems')}",
        )
        if "rng" not in (graded.get("holds") or []):
            record("FAILED", "CUDA random states in the checkpoint", "the grader found no random-number states")
        try:
            resumed = run("resume")
        except Exception as exc:
            record("FAILED", "CUDA resume", repr(exc))
            return
        later = [s for s in straight if s > save_at]
        same = [s for s in later if resumed.get(s) == straight[s]]
        status = "ok" if later and len(same) == len(later) else "FAILED"
        record(status, "bitwise resume on CUDA", f"{len(same)} of {len(later)} later losses equal to the bit")


PROBE = (
    "import json, torch; print(json.dumps([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]))"
)


def check_slots() -> None:
    from runner.campaign.model import parse_campaign
    from runner.daemon.nvml import Nvml
    from runner.daemon.slots import plan_slots

    nv = Nvml()
    count = nv.device_count() if nv.available else 0
    if not count:
        record("skipped", "CUDA_VISIBLE_DEVICES per slot", "no GPU visible through NVML")
        return
    text = f"""
[campaign]
name = "gpu-check"
question = "do slots isolate GPUs?"
[bundle]
provider = "IteraGPU"
gpu = "B200"
gpus = {count}
days = 3
started_at = "2026-01-01T00:00:00Z"
price_usd = 1.0
[[variant]]
name = "control"
category = "essential"
hours = 1
command = ["true"]
"""
    try:
        campaign = parse_campaign(text, Path("gpu-check.toml"))
    except Exception as exc:
        record("FAILED", "CUDA_VISIBLE_DEVICES per slot", f"could not build a campaign for the slot plan: {exc!r}")
        return
    plan = plan_slots(campaign, gpu_count=count, nvml_error=nv.error)
    record("ok", "slot plan", f"{plan.note}: {list(plan.labels)}")
    for label in plan.labels:
        out = subprocess.run(
            [sys.executable, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": label},
        )
        seen = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else None
        status = "ok" if seen is not None and len(seen) == 1 else "FAILED"
        record(status, f"slot CUDA_VISIBLE_DEVICES={label}", f"the child sees {seen}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-at", type=int, default=15)
    args = ap.parse_args()
    for name, fn in (
        ("NVML", check_nvml),
        ("CUDA resume", lambda: check_cuda_resume(args.steps, args.save_at)),
        ("slots", check_slots),
    ):
        try:
            fn()
        except Exception as exc:
            record("FAILED", name, f"the check itself broke: {exc!r}")
    failed = [r for r in RESULTS if r[0] == "FAILED"]
    ran = [r for r in RESULTS if r[0] == "ok"]
    print(f"\n{len(ran)} checks passed, {len(failed)} failed, {len(RESULTS) - len(ran) - len(failed)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
