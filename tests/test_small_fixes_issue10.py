"""Small defects found with real training stacks: each one's regression test."""

from __future__ import annotations

import math

from runner.daemon.watcher import derive_end
from runner.supervision.exit_record import last_output_line
from runner.supervision.rules import _at_step


def test_a_failed_run_names_its_last_output_line_not_only_the_exit_code(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(
        "step 1 loss 2.0\nTraceback (most recent call last):\n  ...\nValueError: bad shape\n--- attempt 1 ended: exit code 1\n"
    )
    last = last_output_line(log)
    assert last == "ValueError: bad shape"
    state, reason = derive_end({"attempt": 1, "returncode": 1, "last_output_line": last}, None, 1)
    assert state == "failed" and reason == "exit code 1: ValueError: bad shape"


def test_verdicts_never_read_at_step_none():
    assert _at_step(None) == "" and _at_step(12) == " at step 12"


def test_a_data_position_that_never_moved_is_named_not_graded_full(tmp_path):
    """Regression: a loader whose position never moved graded `full` with `consumed 0` at step 355."""
    import torch

    from campaign_train.checkpoint import Checkpointer, ResumableSampler
    from runner.grading.checkpoint_grade import grade_path

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ck = Checkpointer(model, opt, sampler=ResumableSampler(10), directory=tmp_path, install_signals=False)
    path = ck.save(355)
    ck.wait()
    res = grade_path(path or ck.last_path)
    assert res["verified"] is True and res["grade"] == "weights+optimizer", res
    assert any("data position is still 0 at step 355" in p for p in res["problems"])


def test_hf_trainer_log_lines_4x_and_5x_quoted_values_counted_steps():
    """Regression: HF 5.x quotes its values and prints no step; a regex written for 4.x matched
    every line and parsed nothing, silently."""
    from runner.supervision.line_parsers import HfLogMetrics, RegexMetrics, line_parser

    hf = line_parser(None, "hf")
    assert isinstance(hf, HfLogMetrics)
    lines = (
        b"{'loss': 5.381, 'grad_norm': 1.28, 'learning_rate': 5e-05, 'epoch': 0.01}\n"
        b"{'loss': '4.9', 'grad_norm': 'nan', 'learning_rate': '4e-05', 'epoch': '0.02'}\n"
        b"{'eval_loss': '4.7', 'epoch': '0.02'}\n"
        b"some other output\n"
        b"{'train_runtime': '12.0', 'train_loss': '5.1', 'epoch': '0.02'}\n"
    )
    recs, _ = hf.parse_block(lines)
    assert [r["step"] for r in recs] == [1, 2, 2]
    assert recs[0]["loss"] == 5.381 and recs[1]["loss"] == 4.9 and math.isnan(recs[1]["grad_norm"])
    assert recs[2]["eval_loss"] == 4.7
    old = RegexMetrics(r"'loss': (?P<loss>[0-9.]*)")  # written for 4.x: matches 5.x lines...
    assert old.parse("{'loss': '4.9', 'epoch': '0.02'}") is None and old.matched_empty == 1  # ...counted
    quoted = RegexMetrics(r"'loss': (?P<loss>\S+)")
    assert quoted.parse("{'loss': '4.9', 'epoch': '0.02'}") == {"loss": 4.9}


def test_metrics_format_is_checked_in_the_campaign_file(tmp_path):
    import pytest

    from runner.campaign.errors import CampaignError
    from runner.campaign.model import load_campaign
    from tests.helpers_plan import variant, write_campaign

    def camp(folder, fmt):
        phases = [{"name": "main", "hours": 10, "variants": ["a"]}]
        return load_campaign(write_campaign(folder, phases=phases, variants=[variant("a", 2, metrics_format=fmt)]))

    assert camp(tmp_path / "a", "hf").variant("a").metrics_format == "hf"
    with pytest.raises(CampaignError, match="metrics_format"):
        camp(tmp_path / "b", "hf5")
