"""Verify: each way a run can fail to be a deliverable is a named problem that blocks approval."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import tomllib

import pytest
from helpers_report import add_run, make_campaign, open_writable, save_checkpoint

from runner.cli import main
from runner.closing.deliverables import DEFAULT_EXPECTS, path_problem, verify_campaign


@pytest.fixture
def camp(tmp_path):
    return make_campaign(tmp_path / "camp")


def _problems(verification, run_id):
    return verification.check(run_id).problems


def test_a_complete_finished_run_is_approved(camp):
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111")
    v = verify_campaign(camp, conn)
    check = v.check("control-11111111")
    assert check.approved, check.problems
    assert check.artifact.name == "final.pt"
    assert check.artifact_check["verified"] is True
    assert {shown for shown, _ in check.files} == set(DEFAULT_EXPECTS)
    assert v.ok


def test_empty_file_blocks_approval(camp):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    (run_dir / "error_analysis.json").write_bytes(b"")
    problems = _problems(verify_campaign(camp, conn), "control-11111111")
    assert "empty: error_analysis.json (0 bytes)" in problems


def test_missing_prediction_file_blocks_approval(camp):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    (run_dir / "predictions.jsonl").unlink()
    v = verify_campaign(camp, conn)
    assert "missing: predictions.jsonl" in _problems(v, "control-11111111")
    assert not v.ok


def test_unparsable_prediction_file_blocks_approval(camp):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    with open(run_dir / "predictions.jsonl", "a") as fh:
        fh.write("{not json\n")
    problems = _problems(verify_campaign(camp, conn), "control-11111111")
    assert any(p.startswith("does not parse: predictions.jsonl: line 21") for p in problems), problems


def test_checkpoint_recorded_in_a_temp_folder_blocks_approval(camp):
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111")
    scratch = tempfile.mkdtemp(prefix="ckpt-scratch-")
    try:
        elsewhere = os.path.join(scratch, "ckpt-000000050.pt")
        conn.execute(
            "INSERT INTO checkpoints(run_id, path, step, t) VALUES (?, ?, 50, 1.0)", ("control-11111111", elsewhere)
        )
        problems = _problems(verify_campaign(camp, conn), "control-11111111")
        assert f"temporary path (outside the campaign): checkpoint {elsewhere}" in problems
    finally:
        shutil.rmtree(scratch)


def test_path_into_a_tmp_folder_inside_the_campaign_is_named(camp):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    inside = run_dir / "tmp" / "ckpt.pt"
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"t": 1.0, "event": "checkpoint", "step": 5, "path": str(inside)}) + "\n")
    problems = _problems(verify_campaign(camp, conn), "control-11111111")
    assert f"temporary path: checkpoint {inside}" in problems


def test_path_outside_the_campaign_is_named(camp, tmp_path):
    assert path_problem(camp, "/opt/models/x.pt") == "outside the campaign"
    assert path_problem(camp, camp.root / ".." / "x.pt") in (
        "outside the campaign",
        "temporary path (outside the campaign)",
    )
    assert path_problem(camp, "/var/tmp/x.pt") == "temporary path (outside the campaign)"
    assert path_problem(camp, camp.root / "runs" / "r" / "checkpoints" / "final.pt") is None
    assert path_problem(camp, camp.root / "runs" / "tmpab12cd34" / "final.pt") == "temporary path"


def test_symlinked_expected_file_pointing_out_of_the_campaign_is_named(camp, tmp_path):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    outside = tmp_path / "elsewhere.jsonl"
    shutil.move(run_dir / "predictions.jsonl", outside)
    os.symlink(outside, run_dir / "predictions.jsonl")
    problems = _problems(verify_campaign(camp, conn), "control-11111111")
    # pytest's tmp_path is itself a temporary folder: either wording names the escape
    assert any("outside the campaign" in p and "predictions.jsonl resolves to" in p for p in problems), problems


def test_adapter_without_base_revision_blocks_approval(tmp_path):
    camp = make_campaign(
        tmp_path / "camp",
        variants=(
            ("control", "essential", 10, ""),
            ("lora", "essential", 10, "adapter = true"),
            ("lora_pinned", "useful", 10, 'adapter = true\nbase_revision = "abc123def"'),
        ),
    )
    conn = open_writable(camp)
    add_run(conn, camp, "lora", config_hash="22222222")
    add_run(conn, camp, "lora_pinned", config_hash="33333333")
    v = verify_campaign(camp, conn)
    assert any(
        p.startswith("adapter without base revision: set base_revision in its [[variant]]")
        for p in _problems(v, "lora-22222222")
    )
    pinned = v.check("lora_pinned-33333333")
    assert pinned.approved, pinned.problems
    assert pinned.base_revision == "abc123def"


def _adapter_folder(run_dir, revision):
    st = pytest.importorskip("safetensors.torch")
    import torch

    folder = run_dir / "adapter"
    folder.mkdir(parents=True, exist_ok=True)
    st.save_file({"base_model.model.lora_A.weight": torch.ones(2, 4)}, folder / "adapter_model.safetensors")
    config = {"base_model_name_or_path": "tiny-base", "revision": revision, "peft_type": "LORA"}
    (folder / "adapter_config.json").write_text(json.dumps(config))


def test_adapter_revision_comes_from_adapter_config_and_a_contradiction_blocks(tmp_path):
    """Regression: adapter_config.json was never read; a declared revision contradicting it was
    approved and RELOAD.md named the wrong one."""
    camp = make_campaign(
        tmp_path / "camp",
        variants=(
            ("control", "essential", 10, ""),
            ("lora", "essential", 10, 'adapter = true\nexpects = ["adapter"]'),
            ("lora_wrong", "useful", 10, 'adapter = true\nbase_revision = "bbbb"\nexpects = ["adapter"]'),
        ),
    )
    conn = open_writable(camp)
    _adapter_folder(add_run(conn, camp, "lora", config_hash="22222222", checkpoint=False), "aaaa")
    _adapter_folder(add_run(conn, camp, "lora_wrong", config_hash="33333333", checkpoint=False), "aaaa")
    v = verify_campaign(camp, conn)
    lora = v.check("lora-22222222")
    assert lora.approved and lora.base_revision == "aaaa", lora.problems
    wrong = v.check("lora_wrong-33333333")
    assert not wrong.approved and any("base revision mismatch" in p and "'aaaa'" in p for p in wrong.problems)


def test_corrupt_final_checkpoint_blocks_approval(camp):
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111")
    final = run_dir / "checkpoints" / "final.pt"
    data = final.read_bytes()
    final.write_bytes(data[: len(data) // 2])  # truncated in transfer
    v = verify_campaign(camp, conn)
    problems = _problems(v, "control-11111111")
    assert any(p.startswith("does not reload: runs/control-11111111/checkpoints/final.pt") for p in problems), problems
    assert not v.check("control-11111111").approved


def test_unfinished_runs_are_not_deliverables(camp):
    conn = open_writable(camp)
    add_run(
        conn,
        camp,
        "rank64",
        config_hash="33333333",
        state="stopped",
        stop_rule="nonfinite",
        stop_reason="loss is nan at step 40",
        stop_value="nan",
        stop_step=40,
        checkpoint=False,
    )
    add_run(
        conn,
        camp,
        "rank16",
        config_hash="22222222",
        state="refused",
        stop_reason="10 h planned; 3 h left before the retrieval deadline",
        checkpoint=False,
        files=False,
    )
    v = verify_campaign(camp, conn)
    assert _problems(v, "rank64-33333333")[0] == "not finished: stopped by rule nonfinite: loss is nan at step 40"
    assert _problems(v, "rank16-22222222")[0].startswith("not finished: refused: 10 h planned")
    assert not v.ok


def test_declared_expects_are_globs_and_replace_the_defaults(tmp_path):
    camp = make_campaign(
        tmp_path / "camp", variants=(("control", "essential", 10, 'expects = ["out/*.ckpt", "predictions.jsonl"]'),)
    )
    conn = open_writable(camp)
    run_dir = add_run(conn, camp, "control", config_hash="11111111", checkpoint=False)
    v = verify_campaign(camp, conn)
    assert _problems(v, "control-11111111") == [
        "missing: out/*.ckpt",
        "no final artifact: the run delivered no checkpoint to reload",
    ]
    save_checkpoint(run_dir / "out" / "model.ckpt")
    v = verify_campaign(camp, conn)
    assert v.check("control-11111111").approved, _problems(v, "control-11111111")


def test_verify_cli_json_writes_manifest_and_reload(camp, capsys):
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111")
    run_dir = add_run(conn, camp, "rank16", config_hash="22222222")
    (run_dir / "predictions.jsonl").write_bytes(b"")
    conn.close()
    rc = main(["verify", str(camp.root), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["ok"] is False
    by_id = {r["id"]: r for r in out["runs"]}
    assert by_id["control-11111111"]["approved"] is True and by_id["control-11111111"]["problems"] == []
    assert by_id["rank16-22222222"]["problems"] == ["empty: predictions.jsonl (0 bytes)"]
    manifest = tomllib.loads((camp.output_path / "manifest.toml").read_text())
    assert [r["id"] for r in manifest["run"]] == ["control-11111111", "rank16-22222222"]
    reload_md = (camp.output_path / "RELOAD.md").read_text()
    assert "campaign checkpoint runs/control-11111111/checkpoints/final.pt --json" in reload_md
    assert "rank16-22222222" not in reload_md


def test_verify_without_a_ledger_reports_nothing_approved(camp, capsys):
    assert main(["verify", str(camp.root)]) == 1
    assert "No runs recorded yet" in capsys.readouterr().out


def test_default_expects_match_the_training_helpers():
    predictions = pytest.importorskip("campaign_train.predictions")
    assert tuple(predictions.DEFAULT_EXPECTS) == DEFAULT_EXPECTS
