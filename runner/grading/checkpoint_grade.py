"""Grade a checkpoint from what the file holds, in a fresh interpreter: is it a resume point?

A file that exists but does not reload is not verified output, and only a new process
proves a reload: nothing the training process holds in memory can help it. So the supervisor and
`campaign checkpoint` run `python -m runner.grading.checkpoint_grade PATH --json` (`verify_in_subprocess`)
and read one JSON object from stdout: the `checkpoint --json` keys (README) (`verified`, `grade`,
`holds`, `problems`) plus `path`, `format`, `step`, `bytes`, `verify_seconds`.

- Our own files (a `campaign-checkpoint/1` sidecar beside them): size and sha256 must match the
  sidecar, the file must load with `torch.load(weights_only=True)`, and every part the sidecar lists
  must be there and make sense (weights are finite tensors, the optimizer's state refers to its
  parameters and matches the weights' shapes, progress agrees with the sidecar...).
- Files written by other programs (`checkpoint_glob` runs): a bare `state_dict`, nanoGPT-style or
  other dicts, and Hugging Face Trainer folders are graded from the parts found.
Grades: `full` (weights, optimizer, progress, RNG states, data position, and scheduler and scaler
where the run has them), `weights+optimizer`, `weights`, `unreadable`. `verified` means the file
loads and its weights are intact; what a file lacks for an exact resume is named in `problems`.

torch is imported only when grading, so `verify_in_subprocess` costs the caller nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from runner.import_paths import tool_env

FORMAT = "campaign-checkpoint/1"
DEFAULT_TIMEOUT_S = 900.0
PARTS = ("model", "optimizer", "scheduler", "scaler", "progress", "rng", "data")

# Keys other programs use for each part (first match wins).
MODEL_KEYS = (
    "model",
    "model_state_dict",
    "state_dict",
    "model_state",
    "net",
    "network",
    "module",
    "weights",
    "ema",
    "params",
)
OPTIMIZER_KEYS = (
    "optimizer",
    "optimizer_state_dict",
    "optim",
    "opt",
    "optimizer_state",
    "optimizers",
    "optimizer_states",
)
SCHEDULER_KEYS = (
    "scheduler",
    "lr_scheduler",
    "scheduler_state_dict",
    "sched",
    "lr_scheduler_state_dict",
    "lr_schedulers",
)
SCALER_KEYS = ("scaler", "grad_scaler", "scaler_state_dict", "amp", "amp_scaler")
PROGRESS_KEYS = ("step", "iter_num", "global_step", "iteration", "iter", "steps", "epoch", "num_updates")
RNG_KEYS = (
    "rng",
    "rng_state",
    "rng_states",
    "torch_rng_state",
    "random_state",
    "cpu_rng_state",
    "cuda_rng_state",
    "numpy_rng_state",
    "python_rng_state",
    "generator",
)
DATA_KEYS = (
    "data",
    "data_state",
    "sampler",
    "sampler_state",
    "dataloader",
    "dataloader_state",
    "data_position",
    "sample_index",
    "consumed_samples",
    "batch_idx",
    "data_iter",
    "shard_index",
    "loops",
)


def _result(path: Path) -> dict[str, Any]:
    return {
        "verified": False,
        "grade": "unreadable",
        "holds": [],
        "problems": [],
        "path": str(path),
        "format": None,
        "step": None,
        "bytes": None,
        "verify_seconds": None,
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def _grade(holds: set[str], expected_extra: AbstractSet[str] = frozenset()) -> str:
    if "model" not in holds:
        return "unreadable"
    if "optimizer" not in holds:
        return "weights"
    full = {"progress", "rng", "data"} | expected_extra
    return "full" if full <= holds else "weights+optimizer"


def _missing_notes(holds: set[str]) -> list[str]:
    notes = {
        "optimizer": "holds no optimizer state (weights only: training cannot resume exactly)",
        "progress": "holds no progress (step or epoch)",
        "rng": "holds no random-number states",
        "data": "holds no data position (sampler state or sample index)",
    }
    if "model" not in holds:
        return ["holds no model weights"]
    return [text for part, text in notes.items() if part not in holds]


# ---------------------------------------------------------------------------------------------
# Checking the parts


def _load(path: Path, problems: list[str]) -> Any:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # the reason is the result: reported, never swallowed
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "Unsupported operand" in str(exc):
            # torch words a file that is no pickle at all (a JSON sidecar, a text file, random
            # bytes) as a weights-only failure; saying it "pickles objects" sent users the wrong way
            head = path.read_bytes()[:1] if path.is_file() else b""
            problems.append(
                "does not load: not a PyTorch checkpoint (neither a zip archive nor a pickle)"
                + (" (it looks like JSON text: the sidecar? name the .pt file)" if head in (b"{", b"[") else "")
            )
        elif "Weights only load failed" in str(exc):
            names = ""
            try:
                names = ", ".join(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
            except Exception:
                pass
            problems.append(
                "does not load with torch.load(weights_only=True): it pickles objects other than "
                f"tensors and plain values{' (' + names + ')' if names else ''}"
            )
        else:
            problems.append(f"does not load: {type(exc).__name__}: {text[:300]}")
        return None


def _is_state_dict(obj: Any) -> bool:
    import torch

    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(v, torch.Tensor) for v in obj.values())
        and all(isinstance(k, str) for k in obj)
    )


def _check_model(sd: Any, problems: list[str]) -> bool:
    if not _is_state_dict(sd):
        problems.append("the model part is not a state dict of named tensors")
        return False
    bad = []
    for name, t in sd.items():
        if t.is_floating_point() or t.is_complex():
            if not bool(t.isfinite().all()):
                bad.append(name)
    if bad:  # the weights are there, but no use as a resume point: not verified
        problems.append(f"the weights hold non-finite values in {len(bad)} tensor(s): {', '.join(bad[:5])}")
    return True


def _check_optimizer(opt: Any, model: dict | None, problems: list[str]) -> bool:
    import torch

    if isinstance(opt, (list, tuple)) and opt and all(isinstance(o, dict) for o in opt):
        return all(_check_optimizer(o, model, problems) for o in opt)
    if not (isinstance(opt, dict) and "state" in opt and "param_groups" in opt):
        problems.append("the optimizer part lacks 'state' or 'param_groups'")
        return False
    groups = opt["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) and "params" in g for g in groups):
        problems.append("the optimizer's param_groups are malformed")
        return False
    ids = [p for g in groups for p in g["params"]]
    state = opt["state"]
    if not isinstance(state, dict):
        problems.append("the optimizer's state is not a mapping")
        return False
    stray = [k for k in state if k not in ids]
    if stray:
        problems.append(f"the optimizer's state refers to parameters {stray[:5]} that no param group holds")
        return False
    if model is not None:
        n_tensors = len(model)
        if len(ids) > n_tensors:
            problems.append(f"the optimizer has {len(ids)} parameters but the weights only {n_tensors} tensors")
            return False
        shapes = {tuple(t.shape) for t in model.values()}
        for pid, st in state.items():
            if not isinstance(st, dict):
                continue
            for key, v in st.items():
                if isinstance(v, torch.Tensor) and v.dim() > 0 and tuple(v.shape) not in shapes:
                    problems.append(
                        f"optimizer state {key!r} of parameter {pid} has shape {tuple(v.shape)}, "
                        "which no weight tensor has"
                    )
                    return False
    return True


def _check_rng(rng: Any, problems: list[str]) -> bool:
    import torch

    if (
        not isinstance(rng, dict)
        or not isinstance(rng.get("torch"), torch.Tensor)
        or rng["torch"].dtype != torch.uint8
        or "python" not in rng
    ):
        problems.append("the RNG part lacks the torch (uint8 tensor) or Python state")
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Our own format


def _grade_own(path: Path, sidecar: dict | None, res: dict[str, Any], state: Any = None) -> None:
    """`sidecar` None: the file is ours (its format key says so) but the save never completed."""
    problems: list[str] = res["problems"]
    res["format"] = "campaign"
    size = path.stat().st_size
    if sidecar is None:
        problems.append("its sidecar is missing: the save did not complete")
        sidecar = {"holds": state.get("holds"), "step": (state.get("progress") or {}).get("step")}
    elif sidecar.get("bytes") != size:
        problems.append(f"the file has {size} bytes, its sidecar says {sidecar.get('bytes')}: truncated or rewritten")
    elif sidecar.get("sha256") != _sha256(path):
        problems.append("its sha256 does not match the sidecar: the file changed after it was written")
    if state is None:
        state = _load(path, problems)
    if state is None:
        return
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        problems.append(f"the file is not a {FORMAT} checkpoint, although its sidecar says so")
        return
    listed = [p for p in sidecar.get("holds") or [] if p in PARTS]
    found: set[str] = set()
    for part in listed:
        if part not in state:
            problems.append(f"the sidecar lists {part!r} but the file does not hold it")
            continue
        value = state[part]
        ok = True
        if part == "model":
            ok = _check_model(value, problems)
        elif part == "optimizer":
            ok = _check_optimizer(value, state.get("model") if _is_state_dict(state.get("model")) else None, problems)
        elif part == "progress":
            step = value.get("step") if isinstance(value, dict) else None
            ok = isinstance(step, int) and step >= 0
            if not ok:
                problems.append("the progress part holds no step")
            elif sidecar.get("step") != step:
                problems.append(f"the file is at step {step}, its sidecar says {sidecar.get('step')}")
                ok = False
            res["step"] = step
        elif part == "rng":
            ok = _check_rng(value, problems)
        elif part in ("scheduler", "scaler"):
            ok = isinstance(value, dict)
            if not ok:
                problems.append(f"the {part} part is not a state dict")
        elif part == "data":
            ok = value is not None
        if ok:
            found.add(part)
    res["holds"] = [p for p in PARTS if p in found]
    res["grade"] = _grade(found, {p for p in ("scheduler", "scaler") if p in listed})
    res["verified"] = not problems and "model" in found
    problems.extend(n for n in _missing_notes(found) if n not in problems)


# ---------------------------------------------------------------------------------------------
# Files from other programs


def _find(d: dict, keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for k in keys:
        if k in d and d[k] is not None:
            return k, d[k]
    return None


def _grade_foreign(path: Path, res: dict[str, Any]) -> None:
    problems: list[str] = res["problems"]
    res["format"] = "foreign"
    obj = _load(path, problems)
    if obj is None:
        return
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        return _grade_own(path, None, res, obj)
    found: set[str] = set()
    if _is_state_dict(obj):
        if _check_model(obj, problems):
            found.add("model")
        model = obj
    elif isinstance(obj, dict):
        model = None
        model_hit = _find(obj, MODEL_KEYS)
        if model_hit and _check_model(model_hit[1], problems):
            found.add("model")
            model = model_hit[1]
        hit = _find(obj, OPTIMIZER_KEYS)
        if hit and _check_optimizer(hit[1], model, problems):
            found.add("optimizer")
        for part, keys in (("scheduler", SCHEDULER_KEYS), ("scaler", SCALER_KEYS)):
            if _find(obj, keys):
                found.add(part)
        hit = _find(obj, PROGRESS_KEYS)
        if hit is not None:
            found.add("progress")
            value = hit[1]
            if isinstance(value, (int, float)) or hasattr(value, "item"):
                try:
                    res["step"] = int(value)
                except (TypeError, ValueError, RuntimeError):
                    pass
        if _find(obj, RNG_KEYS):
            found.add("rng")
        if _find(obj, DATA_KEYS):
            found.add("data")
        if model_hit is None:
            problems.append(f"no weights found under any known key (keys: {', '.join(map(str, list(obj)[:12]))})")
    else:
        problems.append(f"holds a {type(obj).__name__}, not a state dict or a checkpoint dict")
    _finish_foreign(res, found)


def _finish_foreign(res: dict[str, Any], found: set[str]) -> None:
    res["holds"] = [p for p in PARTS if p in found]
    res["grade"] = _grade(found)
    res["verified"] = "model" in found and not res["problems"]
    res["problems"].extend(n for n in _missing_notes(found) if n not in res["problems"])


def _safetensors_header(path: Path, problems: list[str]) -> dict | None:
    """Reads and checks a .safetensors header (no package needed: 8-byte length + JSON)."""
    sizes = {
        "F64": 8,
        "F32": 4,
        "F16": 2,
        "BF16": 2,
        "I64": 8,
        "I32": 4,
        "I16": 2,
        "I8": 1,
        "U8": 1,
        "BOOL": 1,
        "F8_E4M3": 1,
        "F8_E5M2": 1,
        "U16": 2,
        "U32": 4,
        "U64": 8,
    }
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        total = path.stat().st_size - 8 - n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            want = math.prod(meta["shape"]) * sizes.get(meta["dtype"], 0)
            if end > total or end - start != want:
                problems.append(f"{path.name}: tensor {name!r} lies outside the file or has the wrong size")
                return None
        return header
    except (OSError, ValueError, KeyError, struct.error, TypeError) as exc:
        problems.append(f"{path.name}: not a readable safetensors file ({type(exc).__name__})")
        return None


def _grade_hf_folder(folder: Path, res: dict[str, Any]) -> None:
    """A Hugging Face Trainer checkpoint folder: weights, optimizer.pt, scheduler.pt, rng_state*.pth..."""
    problems: list[str] = res["problems"]
    res["format"] = "hf-folder"
    found: set[str] = set()
    weights = (
        sorted(folder.glob("*.safetensors"))
        + sorted(folder.glob("pytorch_model*.bin"))
        + sorted(folder.glob("adapter_model*.bin"))
    )
    if not weights:
        problems.append("the folder holds no model weights (*.safetensors or pytorch_model*.bin)")
    ok = bool(weights)
    for w in weights:
        if w.suffix == ".safetensors":
            ok = _safetensors_header(w, problems) is not None and ok
        else:
            sd = _load(w, problems)
            ok = sd is not None and _check_model(sd, problems) and ok
    if ok:
        found.add("model")
    opt = folder / "optimizer.pt"
    if opt.exists():
        state = _load(opt, problems)
        if state is not None and _check_optimizer(state, None, problems):
            found.add("optimizer")
    for part, name in (("scheduler", "scheduler.pt"), ("scaler", "scaler.pt")):
        if (folder / name).exists() and _load(folder / name, problems) is not None:
            found.add(part)
    rng = sorted(folder.glob("rng_state*.pth"))
    if rng and all(_load(p, problems) is not None for p in rng):
        found.add("rng")
    trainer_state = folder / "trainer_state.json"
    if trainer_state.exists():
        try:
            res["step"] = int(json.loads(trainer_state.read_text())["global_step"])
            found |= {"progress", "data"}  # the Trainer resumes data by skipping global_step batches
        except (OSError, ValueError, KeyError, TypeError):
            problems.append("trainer_state.json does not give a global_step")
    _finish_foreign(res, found)


# ---------------------------------------------------------------------------------------------
# Entry points


def grade_path(path: str | Path) -> dict[str, Any]:
    """Grades `path` in this process (the caller should be a fresh interpreter: see the module doc)."""
    import torch  # noqa: F401  (imported before the clock starts: verify_seconds is the check itself)

    t0 = time.perf_counter()
    path = Path(path).absolute()
    res = _result(path)
    if path.is_dir():
        _grade_hf_folder(path, res)
    elif not path.exists():
        res["problems"].append("does not exist")
    else:
        size = path.stat().st_size
        res["bytes"] = size
        sidecar = _read_sidecar(path)
        if size == 0:
            res["problems"].append("the file is empty (0 bytes)")
            if sidecar is not None:
                res["format"] = "campaign"
        elif sidecar is not None:
            _grade_own(path, sidecar, res)
        else:
            _grade_foreign(path, res)
    res["verify_seconds"] = round(time.perf_counter() - t0, 4)
    return res


def _read_sidecar(path: Path) -> dict | None:
    side = path.with_suffix(".json")
    if side == path:
        return None
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def verify_in_subprocess(path: str | Path, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Grades `path` in a new interpreter (`python -m runner.grading.checkpoint_grade PATH --json`), no GPU visible."""
    path = Path(path).absolute()
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env = tool_env(env)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "runner.grading.checkpoint_grade", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        late = _result(path)
        late["problems"].append(f"verification took longer than {timeout:g} s")
        return late
    res: dict[str, Any] | None = None
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            res = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(res, dict):
        res = _result(path)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        res["problems"].append(f"the verifier exited {proc.returncode}: {tail}")
    res["process_seconds"] = round(time.perf_counter() - t0, 4)
    return res


def render_text(res: dict[str, Any]) -> str:
    head = "verified" if res["verified"] else "NOT verified"
    lines = [f"{res['path']}: {head} (grade {res['grade']})"]
    lines.append(f"  holds: {', '.join(res['holds']) or 'nothing usable'}")
    facts = []
    if res.get("step") is not None:
        facts.append(f"step {res['step']}")
    if res.get("bytes") is not None:
        facts.append(f"{res['bytes'] / 1e6:.1f} MB")
    if res.get("format"):
        facts.append(
            {
                "campaign": "written by campaign_train.checkpoint",
                "foreign": "written by another program",
                "hf-folder": "a Hugging Face Trainer folder",
            }.get(res["format"], res["format"])
        )
    if res.get("verify_seconds") is not None:
        facts.append(f"checked in {res['verify_seconds']:.2f} s in a fresh process")
    if facts:
        lines.append("  " + ", ".join(facts))
    for p in res["problems"]:
        lines.append(f"  - {p}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m runner.grading.checkpoint_grade",
        description="Load a checkpoint in this (fresh) process and grade what it holds.",
    )
    ap.add_argument("path")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args(argv)
    res = grade_path(ns.path)
    print(json.dumps(res) if ns.json else render_text(res), flush=True)
    if not Path(ns.path).exists():
        return 2
    return 0 if res["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
