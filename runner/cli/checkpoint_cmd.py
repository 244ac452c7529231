"""`campaign checkpoint PATH [--json]`: load a checkpoint in a fresh process and grade it.

The same grading the supervisor and `campaign verify` use, for files and folders (Hugging Face,
Accelerate, PEFT, safetensors, FSDP/DCP, DeepSpeed, Lightning...). Exit 0 when verified, 1 when not, 2 when PATH does not exist (bad input). The grading itself runs
in a child interpreter (`runner.grading.checkpoint_grade.verify_in_subprocess`): only a new process proves
that a file reloads, and this command never imports torch itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runner.campaign.errors import CampaignError
from runner.grading.client import render_text, verify_in_subprocess


def cmd_checkpoint(ns: argparse.Namespace) -> int:
    path = Path(ns.path)
    if not path.exists():
        raise CampaignError("does not exist: name a checkpoint file or folder", file=path)
    res = verify_in_subprocess(path, trust_pickled_module=getattr(ns, "trust_pickled_module", False))
    print(json.dumps(res) if getattr(ns, "json", False) else render_text(res))
    return 0 if res.get("verified") else 1
