"""Folders written by the Hugging Face stack: Trainer checkpoints, Accelerate `save_state`
folders, PEFT adapters and plain `save_pretrained` model folders.

- Trainer (`checkpoint-N/`): weights (safetensors or bin, sharded or not, or a PEFT adapter),
  `optimizer.pt`, `scheduler.pt`, `scaler.pt`, `rng_state*.pth` and `trainer_state.json` for the
  step. The Trainer resumes the data by replaying its seeded sampler to `global_step`, so a
  readable trainer state is the data position.
- Accelerate: `model*.safetensors`/`pytorch_model*.bin`, `optimizer*.bin`, `scheduler*.bin`,
  `scaler.pt`, `random_states_*.pkl` (the step is inside), `sampler*.bin`/`dl_state_dict*.bin`.
- PEFT: `adapter_config.json` (base model and revision) and `adapter_model.safetensors|.bin`.
RNG files hold NumPy state: they load with weights_only plus the NumPy names allowed one by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.grading import safetensors_format as st
from runner.grading import torch_files as tf
from runner.grading.result import Format, GradeResult, Part


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def kind(folder: Path) -> Format | None:
    """Which Hugging Face layout `folder` has, from the files in it; None when none."""
    names = {p.name for p in folder.iterdir()}
    if "trainer_state.json" in names or any(n.startswith("rng_state") and n.endswith(".pth") for n in names):
        return Format.HF_TRAINER
    if any(n.startswith("random_states_") for n in names) or any(
        n.startswith("optimizer") and n.endswith(".bin") for n in names
    ):
        return Format.ACCELERATE
    if "adapter_config.json" in names:
        return Format.PEFT_ADAPTER
    if st.weight_files(folder):
        return Format.HF_MODEL
    return None


def _adapter(folder: Path, res: GradeResult) -> bool:
    """A PEFT adapter's weights, and its base model and revision from adapter_config.json."""
    config = _json(folder / "adapter_config.json")
    if config is None:
        res.problem("adapter_config.json is missing or not JSON: the adapter cannot be attached to its base model")
        return False
    res.base_model = config.get("base_model_name_or_path") or None
    rev = config.get("revision")
    res.base_revision = rev if isinstance(rev, str) and rev.strip() else None
    files = st.weight_files(folder, ("adapter_model",))
    if not files:
        res.problem("the adapter folder holds no adapter_model.safetensors or adapter_model.bin")
        return False
    return st.check_weights(files, res)


def _weights(folder: Path, res: GradeResult) -> bool:
    if (folder / "adapter_config.json").is_file():
        return _adapter(folder, res)
    files = st.weight_files(folder)
    if not files:
        res.problem("the folder holds no model weights (model*.safetensors, pytorch_model*.bin or an index)")
        return False
    return st.check_weights(files, res)


def _optimizer(files: list[Path], res: GradeResult) -> None:
    if not files:
        return
    ok = True
    for path in files:
        state = tf.load(path, res, what=path.name)
        ok = state is not None and tf.check_optimizer(state, None, res) and ok
    tf.mark(res, Part.OPTIMIZER, ok)


def _plain(files: list[Path], part: Part, res: GradeResult) -> None:
    if files:
        tf.mark(res, part, all(tf.load(p, res, what=p.name) is not None for p in files))


def _rng(files: list[Path], res: GradeResult) -> None:
    if files:
        tf.mark(res, Part.RNG, all(tf.check_file_rng(p, res) for p in files))


def grade_trainer(folder: Path, res: GradeResult) -> None:
    res.format = Format.HF_TRAINER
    tf.mark(res, Part.MODEL, _weights(folder, res))
    _optimizer([p for p in (folder / "optimizer.pt", folder / "optimizer.bin") if p.is_file()], res)
    _plain([folder / "scheduler.pt"] if (folder / "scheduler.pt").is_file() else [], Part.SCHEDULER, res)
    _plain([folder / "scaler.pt"] if (folder / "scaler.pt").is_file() else [], Part.SCALER, res)
    _rng(sorted(folder.glob("rng_state*.pth")), res)
    state_file = folder / "trainer_state.json"
    if state_file.is_file():
        state = _json(state_file)
        step = state.get("global_step") if state else None
        if isinstance(step, int) and not isinstance(step, bool):
            res.step = step
            res.found |= {Part.PROGRESS, Part.DATA}  # the Trainer replays its seeded sampler to global_step
        else:
            res.problem("trainer_state.json does not give a global_step")


def grade_accelerate(folder: Path, res: GradeResult) -> None:
    res.format = Format.ACCELERATE
    tf.mark(res, Part.MODEL, _weights(folder, res))
    _optimizer(sorted(folder.glob("optimizer*.bin")), res)
    _plain(sorted(folder.glob("scheduler*.bin")), Part.SCHEDULER, res)
    _plain(sorted(folder.glob("scaler*.pt")), Part.SCALER, res)
    rng = sorted(folder.glob("random_states_*.pkl"))
    _rng(rng, res)
    for path in rng[:1]:
        state = tf.load(path, GradeResult(path=str(path)), numpy_ok=True)
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            res.step = step
            res.found.add(Part.PROGRESS)
    data = sorted(folder.glob("sampler*.bin")) + sorted(folder.glob("dl_state_dict*.bin"))
    _plain(data, Part.DATA, res)


def grade_adapter(folder: Path, res: GradeResult) -> None:
    res.format = Format.PEFT_ADAPTER
    tf.mark(res, Part.MODEL, _adapter(folder, res))


def grade_model_folder(folder: Path, res: GradeResult) -> None:
    res.format = Format.HF_MODEL
    tf.mark(res, Part.MODEL, _weights(folder, res))


GRADERS = {
    Format.HF_TRAINER: grade_trainer,
    Format.ACCELERATE: grade_accelerate,
    Format.PEFT_ADAPTER: grade_adapter,
    Format.HF_MODEL: grade_model_folder,
}
