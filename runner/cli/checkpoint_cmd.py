"""`campaign checkpoint PATH [--json]`: load a checkpoint in a fresh process and grade it.

Exit 0 when verified, 1 when not, 2 when PATH does not exist (bad input). The grading itself runs
in a child interpreter (`runner.grading.checkpoint_grade.verify_in_subprocess`): only a new process proves
that a file reloads, and this command never imports torch itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runner.campaign.errors import CampaignError
from runner.grading.checkpoint_grade import render_text, verify_in_subprocess


def cmd_checkpoint(ns: argparse.Namespace) -> int:
    path = Path(ns.path)
    if not path.exists():
        raise CampaignError("does not exist: name a checkpoint file (or a Hugging Face checkpoint folder)", file=path)
    res = verify_in_subprocess(path)
    print(json.dumps(res) if getattr(ns, "json", False) else render_text(res))
    return 0 if res.get("verified") else 1
