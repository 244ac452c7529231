"""Hostile input, judged without a runner (issue 11): each finding's fault reproduced for real on
the part that broke, in process (the live counterparts are in test_faults_runner.py).

#2/#3 huge integers in metric lines, #14 "NaN" as a string and C runtimes' `-nan(ind)`/`1.#INF`,
#4 a deeply nested line, #5-#7 campaign values that `check` accepted and `start` broke on, #13 the
training side's pruning that deleted the newest verified resume point.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign
from runner.campaign.numbers import metric_number, parse_number_text
from runner.cli import main as cli_main
from runner.closing.deliverables import parse_problem
from runner.closing.ledger_reads import iter_jsonl
from runner.ledger import store as L
from runner.supervision.line_parsers import RegexMetrics
from runner.supervision.metric_stream import decode_lines
from runner.supervision.rules import Judge

pytestmark = pytest.mark.faults

HUGE = 10**400  # 400 digits: no float holds it

BASE = """\
[campaign]
name = "t"
question = "q"

[bundle]
gpu = "RTX 4090"
days = 3
started_at = 2026-11-29T09:00:00Z
{bundle}
[[variant]]
name = "{name}"
category = "essential"
command = {command}
hours = {hours}
{variant}
[[rule]]
kind = "nonfinite"
"""


def campaign_text(
    *, name: str = "a", command: str = '["python", "t.py"]', hours: str = "1", variant: str = "", bundle: str = ""
) -> str:
    return BASE.format(name=name, command=command, hours=hours, variant=variant, bundle=bundle)


# ---------------------------------------------------------------------------------------------
# #2, #3, #14: metric values


def test_a_400_digit_loss_is_judged_by_the_runs_rule_not_an_overflow():
    judge = Judge([{"kind": "nonfinite", "metric": "loss"}, {"kind": "above", "metric": "loss", "threshold": 5}])
    assert judge.feed({"step": 5, "loss": 1.0}) is None
    verdict = judge.feed({"step": 6, "loss": HUGE})  # raised OverflowError in rules.py
    assert verdict is not None and verdict.kind == "nonfinite" and verdict.value == math.inf


def test_huge_step_samples_and_truncated_are_confined_to_the_metric_lines(tmp_path):
    judge = Judge([{"kind": "truncated", "max_fraction": 0.5}])
    judge.feed({"step": HUGE, "samples": HUGE, "truncated": HUGE, "loss": 1.0})  # no exception
    ledger = L.Ledger(tmp_path / "ledger.sqlite")
    ledger.insert_run(
        dict(
            id="a-1", variant="a", category="essential", config_hash="1", state="running", run_dir="x", planned_hours=1
        )
    )
    rows = [
        {"t": 1.0, "step": 1, "loss": 2.0, "samples": 10, "truncated": 0},
        {"t": HUGE, "step": HUGE, "loss": HUGE, "samples": HUGE, "truncated": -HUGE},
        {"t": 3.0, "step": 3, "acc": 0.5, "samples": 10},
    ]
    ledger.record_metrics("a-1", rows, offset=100, bad_lines=0, restarts=0)  # raised OverflowError
    prog = L.progress(ledger.conn)["a-1"]
    assert prog["lines"] == 3 and prog["offset"] == 100 and prog["samples"] == 20 and prog["last_step"] == 3
    last = L.metric_last(ledger.conn)["a-1"]
    assert last["loss"]["value"] == math.inf and last["acc"]["value"] == 0.5


def test_a_string_nan_loss_updates_the_loss_column(tmp_path):
    ledger = L.Ledger(tmp_path / "ledger.sqlite")
    ledger.record_metrics("r", [{"step": 1, "loss": 2.5}], offset=1, bad_lines=0, restarts=0)
    ledger.record_metrics("r", [{"step": 2, "loss": "NaN"}], offset=2, bad_lines=0, restarts=0)
    assert math.isnan(L.metric_last(ledger.conn)["r"]["loss"]["value"])  # it kept 2.5 before
    assert Judge([{"kind": "nonfinite"}]).feed({"step": 2, "loss": "NaN"}) is not None


@pytest.mark.parametrize(
    "text,expected",
    [("-nan(ind)", math.nan), ("1.#INF", math.inf), ("-1.#INF", -math.inf), ("1.#QNAN", math.nan), ("nan,", math.nan)],
)
def test_c_runtime_words_in_a_log_line_are_numbers(text, expected):
    rec = RegexMetrics(r"step (?P<step>\d+) loss (?P<loss>\S+)").parse(f"step 7 loss {text}")
    assert rec is not None and rec["step"] == 7
    assert (math.isnan(rec["loss"]) and math.isnan(expected)) or rec["loss"] == expected
    assert metric_number("-inf") == -math.inf and parse_number_text("garbage") is None


# ---------------------------------------------------------------------------------------------
# #4: deep nesting


def test_a_deeply_nested_metric_line_is_skipped_not_a_recursion_error(tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "loss": 1.0}\n' + deep + b"\n" + b'{"step": 2, "loss": 0.5}\n')
    assert [r["step"] for r in iter_jsonl(path)] == [1, 2]  # raised RecursionError
    assert "nested too deeply" in (parse_problem(path) or "")
    records, garbage = decode_lines(path.read_bytes())
    assert [r["step"] for r in records] == [1, 2] and garbage == 1
    from campaign_train.atomic import read_json

    (tmp_path / "deep.json").write_bytes(deep)
    assert read_json(tmp_path / "deep.json", "fallback") == "fallback"


# ---------------------------------------------------------------------------------------------
# #5, #6, #7: what `check` accepted and `start` broke on: exit 2, the field named


HOSTILE = [
    ("env key with =", dict(variant='env = { "A=B" = "x" }'), "env"),
    ("env key with NUL", dict(variant='env = { "A\\u0000B" = "x" }'), "env"),
    ("300-character name", dict(name="a" * 300), "variant[0].name"),
    ("hours = nan", dict(hours="nan"), "variant[0].hours"),
    ("hours = inf", dict(hours="inf"), "variant[0].hours"),
    ("hours = 1e308", dict(hours="1e308"), "variant[0].hours"),
    ("NUL in command", dict(command='["python", "t\\u0000.py"]'), "variant[0].command"),
    ("gpus = 0", dict(variant="gpus = 0"), "variant[0].gpus"),
    ("price_usd = nan", dict(bundle="price_usd = nan"), "bundle.price_usd"),
    ("retrieval_hours = 1e308", dict(bundle="retrieval_hours = 1e308"), "bundle.retrieval_hours"),
    ("retrieval_hours = inf", dict(bundle="retrieval_hours = inf"), "bundle.retrieval_hours"),
    ("retrieval_hours past the window", dict(bundle="retrieval_hours = 72"), "bundle.retrieval_hours"),
    ("checkpoint_every of 400 digits", dict(variant='checkpoint_every = "' + "9" * 400 + 'h"'), "checkpoint_every"),
    ("a 20-digit integer", dict(hours="99999999999999999999"), "variant[0].hours"),
]


@pytest.mark.parametrize("what,parts,field", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_check_refuses_values_that_cannot_be_launched(tmp_path, capsys, what, parts, field):
    path = tmp_path / "campaign.toml"
    path.write_text(campaign_text(**parts))
    assert cli_main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    named = err.split("field '", 1)[1] if "field '" in err else ""
    assert field in named.split("': ", 1)[0] and "Traceback" not in err, err


def test_check_refuses_a_window_in_year_9999_and_5000_nested_arrays(tmp_path, capsys):
    path = tmp_path / "campaign.toml"
    path.write_text(campaign_text().replace("2026-11-29T09:00:00Z", "9999-12-31T23:00:00Z"))
    assert cli_main(["check", str(path)]) == 2
    assert "field 'bundle.started_at'" in capsys.readouterr().err
    path.write_text(campaign_text(variant="expects = " + "[" * 5000 + "]" * 5000))
    assert cli_main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "field 'expects'" in err and ":15:" in err and "nested more than" in err and "Traceback" not in err
    path.write_text(campaign_text(variant='expects = "' + "[" * 5000 + '"'))  # inside a string: no nesting
    with pytest.raises(CampaignError, match="expects"):
        load_campaign(path)  # (a string is not a list: refused for its type, not for depth)


def test_every_accepted_value_plans_and_reports(tmp_path, capsys):
    """The largest values `check` accepts still plan (no overflow in date arithmetic)."""
    path = tmp_path / "campaign.toml"
    path.write_text(campaign_text(hours="87840", bundle="retrieval_hours = 71.5\nwarn_hours = 87840"))
    assert cli_main(["check", str(path)]) == 0
    assert cli_main(["plan", str(path)]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# #13: the newest verified resume point outlives saving that outruns verification


PRUNE_SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from campaign_train.checkpoint import MAX_PENDING_VERIFY, Checkpointer, verify_record_paths

model = torch.nn.Linear(2, 2)
ck = Checkpointer(model, torch.optim.SGD(model.parameters(), lr=0.1), directory=sys.argv[1], keep=3,
                  install_signals=False, background=False)

def verify(step, ok=True):
    p = ck.dir / f"ckpt-{step:09d}.pt"
    verify_record_paths(p)[0].write_text(json.dumps({"path": str(p), "verified": ok}))

def steps():
    return sorted(int(p.stem.split("-")[1]) for p in ck.dir.glob("ckpt-*.pt"))

def save(*numbers):
    for n in numbers:
        ck.save(n)
        ck.wait()

out = {}
save(5, 10)
verify(5)
save(*range(11, 20))  # saving outruns verification: none of these is judged yet
out["lagging"] = steps()
verify(10, ok=False)
verify(12)
save(20)
out["after_12_verified"] = steps()
save(*range(21, 21 + MAX_PENDING_VERIFY + 5))
out["bounded"] = steps()
out["max_pending"] = MAX_PENDING_VERIFY
out["record_5_left"] = any(p.exists() for p in verify_record_paths(ck.dir / f"ckpt-{5:09d}.pt"))
print(json.dumps(out))
"""


def test_pruning_keeps_the_newest_verified_checkpoint_and_those_awaiting_verification(tmp_path):
    """Under a runner, saving every second while each grading takes seconds pruned the file the
    ledger named as the resume point (and the file being graded: "the checkpoint file is gone")."""
    import subprocess
    import sys

    from runner.import_paths import tool_env

    script = tmp_path / "prune.py"
    script.write_text(PRUNE_SCRIPT)
    env = tool_env(dict(os.environ, CAMPAIGN_RUN_DIR=str(tmp_path), CAMPAIGN_VERIFY="supervisor"))
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ck")], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["lagging"] == [5, 10, *range(11, 20)]  # the resume point the ledger names is still there
    assert out["after_12_verified"] == [12, *range(13, 21)]  # 5 went only once a newer one was verified
    assert 12 in out["bounded"] and len(out["bounded"]) == 1 + out["max_pending"]  # the wait is bounded
    assert not out["record_5_left"]
