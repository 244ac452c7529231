"""Predictions and error analysis written into the run folder; the default deliverable names."""

from __future__ import annotations

import json

import pytest
import torch
from helpers_training import training_run_dir  # noqa: F401 (fixture)

from campaign_train.checkpoint import Checkpointer, latest_checkpoint
from campaign_train.predictions import DEFAULT_EXPECTS, error_analysis, finish, write_error_analysis, write_predictions


def test_error_analysis_counts_per_class_and_bucket():
    labels = ["a", "a", "b", "b", "c", "c"]
    preds = ["a", "b", "b", "a", "c", "c"]
    result = error_analysis(labels, preds, buckets=["short", "long", "short", "long", "short", "short"])
    assert result["examples"] == 6 and result["errors"] == 2 and result["accuracy"] == round(4 / 6, 4)
    assert result["per_class"]["a"] == {"count": 2, "errors": 1, "error_rate": 0.5}
    assert result["per_class"]["c"]["errors"] == 0
    assert result["per_bucket"]["long"] == {"count": 2, "errors": 2, "error_rate": 1.0}
    assert {(c["label"], c["predicted"]) for c in result["top_confusions"]} == {("a", "b"), ("b", "a")}
    assert result["summary"][0].startswith("2 errors in 6 examples")
    assert any("Bucket long: 2/2 wrong" in line for line in result["summary"])


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="2 labels but 1 predictions"):
        error_analysis([1, 2], [1])
    with pytest.raises(ValueError, match="empty predictions file"):
        write_predictions([], tmp_path)


def test_files_are_written_whole_and_tensors_become_plain_values(tmp_path):
    write_predictions([{"id": "x1", "label": torch.tensor(1), "scores": torch.tensor([0.25, 0.75])}], tmp_path)
    row = json.loads((tmp_path / "predictions.jsonl").read_text())
    assert row == {"id": "x1", "label": 1, "scores": [0.25, 0.75]}
    write_error_analysis(torch.tensor([0, 1]), torch.tensor([0, 0]), extra={"split": "dev"}, run_dir=tmp_path)
    analysis = json.loads((tmp_path / "error_analysis.json").read_text())
    assert analysis["split"] == "dev" and analysis["errors"] == 1
    assert not list(tmp_path.glob(".*tmp*"))


def test_finish_writes_the_default_deliverables(tmp_path):
    model = torch.nn.Linear(2, 2)
    ck = Checkpointer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), directory=tmp_path / "checkpoints", install_signals=False
    )
    paths = finish(ck, 10, [{"id": 1, "label": 0, "prediction": 1}], labels=[0], predictions=[1])
    assert sorted(str(p.relative_to(tmp_path)) for p in paths) == sorted(DEFAULT_EXPECTS)
    assert json.loads((tmp_path / "checkpoints" / "final.json").read_text())["final"] is True


def test_latest_checkpoint_skips_incomplete_and_failed_ones(tmp_path):
    model = torch.nn.Linear(2, 2)
    ck = Checkpointer(model, directory=tmp_path, install_signals=False, keep=10)
    for step in (1, 2, 3):
        ck.save(step)
        ck.wait()
    assert latest_checkpoint(tmp_path).name == "ckpt-000000003.pt"
    (tmp_path / "ckpt-000000003.verify.json").write_text(json.dumps({"verified": False}))
    assert latest_checkpoint(tmp_path).name == "ckpt-000000002.pt"
    (tmp_path / "ckpt-000000002.json").unlink()  # no sidecar: the save never completed
    assert latest_checkpoint(tmp_path).name == "ckpt-000000001.pt"
