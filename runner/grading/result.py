"""What a grading says about one checkpoint: its format, the parts it holds, its grade, its problems.

The JSON keys are the `checkpoint --json` answer (`verified`, `grade`, `holds`, `problems`, plus
`path`, `format`, `step`, `bytes`, `verify_seconds`, and for adapters `base_model` and
`base_revision`). stdlib only: this module is imported by the grader child and by its callers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from campaign_train import formats

FORMAT = formats.FORMAT  # the project's own files (campaign_train.checkpoint)


class Part(StrEnum):
    """What an exact resume needs, in the order `holds` lists it."""

    MODEL = "model"
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    SCALER = "scaler"
    PROGRESS = "progress"
    RNG = "rng"
    DATA = "data"


PARTS = tuple(p.value for p in Part)


class Grade(StrEnum):
    FULL = "full"
    WEIGHTS_OPTIMIZER = "weights+optimizer"
    WEIGHTS = "weights"
    UNREADABLE = "unreadable"


class Format(StrEnum):
    """Who wrote the checkpoint, as recognised from its content (never from its name alone)."""

    CAMPAIGN = "campaign"
    STATE_DICT = "state-dict"
    DICT = "checkpoint-dict"
    LIGHTNING = "lightning"
    PICKLED_MODULE = "pickled-module"
    SAFETENSORS = "safetensors"
    SHARDED_SAFETENSORS = "safetensors-sharded"
    HF_TRAINER = "hf-trainer"
    HF_MODEL = "hf-model"
    ACCELERATE = "accelerate"
    PEFT_ADAPTER = "peft-adapter"
    DCP = "torch-dcp"
    DEEPSPEED = "deepspeed"
    UNKNOWN = "unknown"


DESCRIPTIONS = {
    Format.CAMPAIGN: "written by campaign_train.checkpoint",
    Format.STATE_DICT: "a bare state_dict",
    Format.DICT: "a checkpoint dict written by another program",
    Format.LIGHTNING: "a Lightning checkpoint",
    Format.PICKLED_MODULE: "a pickled nn.Module (torch.save(model))",
    Format.SAFETENSORS: "a safetensors file",
    Format.SHARDED_SAFETENSORS: "sharded safetensors (through their index)",
    Format.HF_TRAINER: "a Hugging Face Trainer checkpoint folder",
    Format.HF_MODEL: "a Hugging Face model folder (save_pretrained)",
    Format.ACCELERATE: "an Accelerate save_state folder",
    Format.PEFT_ADAPTER: "a PEFT adapter",
    Format.DCP: "a torch.distributed.checkpoint (FSDP) folder",
    Format.DEEPSPEED: "a DeepSpeed checkpoint",
}

MISSING_NOTES = {
    Part.OPTIMIZER: "holds no optimizer state (weights only: training cannot resume exactly)",
    Part.PROGRESS: "holds no progress (step or epoch)",
    Part.RNG: "holds no random-number states",
    Part.DATA: "holds no data position (sampler state or sample index)",
}


@dataclass
class GradeResult:
    path: str
    verified: bool = False
    grade: Grade = Grade.UNREADABLE
    holds: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    format: Format | None = None
    step: int | None = None
    bytes: int | None = None
    verify_seconds: float | None = None
    base_model: str | None = None  # adapters: what adapter_config.json names
    base_revision: str | None = None
    notes: list[str] = field(default_factory=list, repr=False)  # named, but not blocking `verified`
    found: set[Part] = field(default_factory=set, repr=False)
    expected: set[Part] = field(default_factory=set, repr=False)  # scheduler/scaler the run declared

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def note(self, text: str) -> None:
        """A weakness that lowers the grade without making the weights unusable."""
        if text not in self.notes:
            self.notes.append(text)

    def finish(self) -> GradeResult:
        """Grade from the parts found; `verified` needs intact weights and no problem so far."""
        found = self.found
        self.holds = [p.value for p in Part if p in found]
        if Part.MODEL not in found:
            self.grade = Grade.UNREADABLE
        elif Part.OPTIMIZER not in found:
            self.grade = Grade.WEIGHTS
        else:
            need = {Part.PROGRESS, Part.RNG, Part.DATA} | self.expected
            self.grade = Grade.FULL if need <= found else Grade.WEIGHTS_OPTIMIZER
        self.verified = Part.MODEL in found and not self.problems
        for text in self.notes:
            self.problem(text)
        if Part.MODEL not in found:
            self.problem("holds no model weights")
        else:
            for part, text in MISSING_NOTES.items():
                if part not in found:
                    self.problem(text)
        return self

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("found")
        out.pop("notes")
        out.pop("expected")
        out["grade"] = self.grade.value
        out["format"] = self.format.value if self.format else None
        return out


def failed(path: str, problem: str) -> dict[str, Any]:
    """The answer when no grader answered (it crashed, timed out, or could not start)."""
    return GradeResult(path=path, problems=[problem]).to_json()
