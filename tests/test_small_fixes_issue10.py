"""Small defects found with real training stacks: each one's regression test."""

from __future__ import annotations

from runner.daemon.watcher import derive_end
from runner.supervision.rules import _at_step
from runner.supervision.supervisor import last_output_line


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
