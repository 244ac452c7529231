"""The supervisor's files and environment: garbage lines, the run's environment, checkpoint
verification records, resumed attempts, and runs that cannot start."""

import importlib.util
import json
import math
import os
import sys

import pytest

from tests.helpers_supervision import METRIC_WRITER, RunFolder

PY = sys.executable
HAVE_GRADER = importlib.util.find_spec("runner.grading.checkpoint_grade") is not None


@pytest.fixture
def run(tmp_path):
    r = RunFolder(tmp_path / "camp")
    yield r
    r.cleanup()


def test_garbage_and_partial_lines_are_counted_not_fatal(run):
    run.script(
        "messy.py",
        """
import json, os, time
p = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
with open(p, "ab") as f:
    f.write(b'{"step": 1, "loss": 1.5}\\nthis is not json\\n[1, 2]\\n{"step": 2, "lo')
    f.flush(); time.sleep(0.3)
    f.write(b'ss": 1.25}\\n\\xff\\xfe\\x00\\n{"step": 3, "loss": 1.0}\\n{"step": 4, "loss"')  # cut for ever
""",
    )
    run.write([PY, "messy.py"], [{"kind": "nonfinite"}])
    run.run()
    ex = run.json("exit.json")
    assert ex["returncode"] == 0 and ex["killed_by"] is None
    assert ex["metric_lines"] == 3 and ex["garbage_lines"] == 3
    assert not (run.dir / "verdict.json").exists()


def test_the_run_gets_its_environment_and_the_campaign_folder_as_cwd(run):
    run.script(
        "env.py",
        """
import json, os
keys = ["CAMPAIGN_RUN_ID", "CAMPAIGN_RUN_DIR", "CAMPAIGN_DIR", "CAMPAIGN_ATTEMPT", "CAMPAIGN_CHECKPOINT_EVERY",
        "CAMPAIGN_RESUME_FROM", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "MY_VAR", "FROZEN"]
json.dump({"cwd": os.getcwd(), "pgid": os.getpgid(0), "pid": os.getpid(), "sid": os.getsid(0),
           "env": {k: os.environ.get(k) for k in keys}}, open("env.json", "w"))
print("hello from stdout"); import sys; print("hello from stderr", file=sys.stderr)
""",
    )
    run.write(
        [PY, "env.py"], [], variant_extra={"checkpoint_every": "30m", "env": {"MY_VAR": "x"}}, env={"FROZEN": "y"}
    )
    run.run()
    got = json.loads((run.campaign / "env.json").read_text())
    assert got["cwd"] == str(run.campaign)
    assert got["pgid"] == got["pid"] == got["sid"]  # its own session and group
    env = got["env"]
    assert env["CAMPAIGN_RUN_ID"] == run.run_id and env["CAMPAIGN_RUN_DIR"] == str(run.dir)
    assert env["CAMPAIGN_DIR"] == str(run.campaign) and env["CAMPAIGN_ATTEMPT"] == "1"
    assert env["CAMPAIGN_CHECKPOINT_EVERY"] == "1800" and env["CAMPAIGN_RESUME_FROM"] is None
    assert env["PYTHONUNBUFFERED"] == "1" and env["MY_VAR"] == "x" and env["FROZEN"] == "y"
    assert env["CUDA_VISIBLE_DEVICES"] is not None
    log = run.log()
    assert "hello from stdout" in log and "hello from stderr" in log


def test_a_resumed_attempt_judges_only_its_own_lines(run):
    (run.dir / "metrics.jsonl").write_text('{"step": 9, "loss": NaN}\n{"step": 10, "loss"')
    run.script(
        "resume.py",
        METRIC_WRITER
        + """
import os
assert os.environ["CAMPAIGN_ATTEMPT"] == "2"
assert os.environ["CAMPAIGN_RESUME_FROM"].endswith("ckpt-000000008.pt")
emit(step=11, loss=0.5)
""",
    )
    run.write(
        [PY, "resume.py"],
        [{"kind": "nonfinite"}, {"kind": "no_resume_point", "within": "1s"}],
        attempt=2,
        resume_from=str(run.dir / "checkpoints" / "ckpt-000000008.pt"),
    )
    run.run()
    ex = run.json("exit.json")
    assert ex["attempt"] == 2 and ex["returncode"] == 0, run.log()
    assert not (run.dir / "verdict.json").exists()


def test_harness_checkpoint_is_verified_in_a_fresh_process(run):
    run.script(
        "ckpt.py",
        """
import torch
from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ck = Checkpointer(model, opt, every_s=3600)
metrics.report(3, loss=0.7)
ck.save(3)
ck.wait()
import time; time.sleep(0.5)
""",
    )
    run.write([PY, "ckpt.py"], [{"kind": "nonfinite"}])
    run.run(timeout=180)
    rec = json.loads((run.dir / "checkpoints" / "ckpt-000000003.verify.json").read_text())
    assert set(rec) >= {"path", "step", "verified", "grade", "holds", "problems", "verify_seconds", "at"}
    assert rec["path"].endswith("ckpt-000000003.pt") and rec["step"] == 3
    if HAVE_GRADER:
        assert rec["verified"] is True and rec["grade"] in ("full", "weights+optimizer"), rec
        assert run.json("exit.json")["checkpoints_verified"] == 1
    else:
        assert rec["verified"] is False and "checkpoint_grade" in " ".join(rec["problems"])


def test_checkpoint_glob_for_scripts_that_save_on_their_own(run):
    run.script(
        "saver.py",
        """
import os, time
os.makedirs("out", exist_ok=True)
with open("out/tmp.bin", "wb") as f:
    f.write(os.urandom(4096))
os.replace("out/tmp.bin", "out/model-000042.pt")
time.sleep(3)
""",
    )
    run.write([PY, "saver.py"], [], variant_extra={"checkpoint_glob": "out/*.pt"})
    run.run(timeout=120)
    rec = json.loads((run.campaign / "out" / "model-000042.verify.json").read_text())
    assert rec["step"] == 42 and rec["verified"] is False and rec["problems"]  # random bytes


HF_LIKE_SAVER = """
import json, os, struct, time
def safetensors(path, n):
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack(f"<{n}f", *([0.5] * n)))
safetensors("out/single.safetensors", 8) if os.makedirs("out") is None else None
time.sleep(1.5)
for step in (10, 5):  # saved out of step order: the kept copy must still be the newest step
    d = f"out/checkpoint-{step}"
    os.makedirs(d)
    safetensors(f"{d}/model.safetensors", 4)
    json.dump({"global_step": step}, open(f"{d}/trainer_state.json", "w"))
    time.sleep(1.5)
time.sleep(3)
"""


def test_checkpoint_glob_matching_folders_and_safetensors_grades_them(run):
    """Regression: folders matched by checkpoint_glob were skipped (never graded), and a
    safetensors file was graded through its `*.candidate` copy as "not a PyTorch checkpoint"."""
    from runner.grading.client import verify_in_subprocess
    from runner.supervision import kept_copy

    run.script("hfsaver.py", HF_LIKE_SAVER)
    run.write([PY, "hfsaver.py"], [], variant_extra={"checkpoint_glob": "out/*"})
    run.run(timeout=120)
    out = run.campaign / "out"
    for step in (5, 10):
        rec = json.loads((out / f"checkpoint-{step}.verify.json").read_text())
        assert rec["verified"] is True and rec["step"] == step and rec["grade"] == "weights", rec
        by_hand = verify_in_subprocess(out / f"checkpoint-{step}")
        assert (by_hand["verified"], by_hand["grade"], by_hand["holds"]) == (True, rec["grade"], rec["holds"])
    single = json.loads((out / "single.verify.json").read_text())
    assert single["verified"] is True and single["grade"] == "weights", single
    assert verify_in_subprocess(out / "single.safetensors")["grade"] == single["grade"]
    meta = json.loads((kept_copy.kept_dir(run.dir) / "kept.json").read_text())
    assert meta["step"] == 10 and meta["original"].endswith("checkpoint-10"), meta


def test_a_command_that_cannot_start_still_ends_with_exit_json(run):
    run.write(["/nonexistent/trainer", "--go"], [])
    assert run.run() == 1
    ex = run.json("exit.json")
    assert ex["returncode"] == 127 and "nonexistent" in ex["error"]
    assert "could not start" in run.log()


def test_a_bad_frozen_rule_is_named(run):
    run.write([PY, "-c", "pass"], [{"kind": "stalled", "within": "soon"}])
    assert run.run() == 2
    ex = run.json("exit.json")
    assert "run.toml" in ex["error"] and "rule[0].within" in ex["error"]


def test_non_finite_value_round_trips_through_verdict_json(run):
    run.script("inf.py", METRIC_WRITER + "emit(step=2, loss=float('-inf'))\nimport time; time.sleep(30)\n")
    run.write([PY, "inf.py"], [{"kind": "nonfinite"}])
    run.run()
    assert run.json("verdict.json")["value"] == -math.inf


def test_a_verify_record_speaks_only_for_the_version_it_graded(tmp_path):
    """A script that rewrites its checkpoint in place can save a new version while the old one is
    being graded: the record, written after the new save, must not pass for the new version."""
    import json as _json

    from runner.supervision.checkpoints import _graded_already, write_verify_record

    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"version 250")
    st = ckpt.stat()
    old_sig = (st.st_size, st.st_mtime_ns)
    ckpt.write_bytes(b"version 500")  # the in-place save lands while 250 is being graded
    os.utime(ckpt, ns=(st.st_mtime_ns + 1_000, st.st_mtime_ns + 1_000))
    new_st = ckpt.stat()
    new_sig = (new_st.st_size, new_st.st_mtime_ns)
    record = write_verify_record(ckpt, 250, {"verified": True, "grade": "weights"}, [], 2.5, 0.0, source=old_sig)
    record_path = ckpt.with_name("ckpt.verify.json")
    assert _json.loads(record_path.read_text())["source_signature"] == list(old_sig) == record["source_signature"]
    assert record_path.stat().st_mtime_ns >= new_sig[1]  # written after the new save: mtime alone would lie
    assert _graded_already(record_path, old_sig) is True
    assert _graded_already(record_path, new_sig) is False
