"""`campaign init`, `check` and `plan` through the real command, in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers_plan import brief_campaign

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_init_writes_a_template_that_checks_and_refuses_to_overwrite(tmp_path):
    r = campaign("init", "mine", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    target = tmp_path / "mine" / "campaign.toml"
    text = target.read_text()
    assert text.count("#") > 20 and 'name = "mine"' in text  # commented, named for its folder

    r = campaign("check", "mine", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ok:" in r.stdout and "variants  2" in r.stdout and "rules     4" in r.stdout

    target.write_text(text + "\n# my edits\n")
    r = campaign("init", "mine", cwd=tmp_path)
    assert r.returncode == 2 and "--force" in r.stderr
    assert target.read_text().endswith("# my edits\n")  # nothing lost
    r = campaign("init", "mine", "--force", cwd=tmp_path)
    assert r.returncode == 0 and "# my edits" not in target.read_text()


def test_init_defaults_to_the_current_folder(tmp_path):
    r = campaign("init", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert campaign("plan", cwd=tmp_path).returncode == 0


def test_check_exits_2_naming_file_line_and_field(tmp_path):
    assert campaign("init", cwd=tmp_path).returncode == 0
    path = tmp_path / "campaign.toml"
    text = path.read_text().replace('category = "essential"', 'category = "vital"', 1)
    path.write_text(text)
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if 'category = "vital"' in ln)
    r = campaign("check", cwd=tmp_path)
    assert r.returncode == 2
    assert f"campaign.toml:{line}:" in r.stderr and "variant[0].category" in r.stderr and "vital" in r.stderr
    assert r.stdout == ""


def test_check_and_plan_without_a_file_exit_2(tmp_path):
    for cmd in ("check", "plan"):
        r = campaign(cmd, cwd=tmp_path)
        assert r.returncode == 2 and "campaign init" in r.stderr


def test_plan_json_reproduces_the_brief(tmp_path):
    brief_campaign(tmp_path / "c", extra_variants=True)
    r = campaign("plan", "c", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["window_hours"], data["committed_hours"], data["over_hours"], data["fits"]) == (72, 78, 6, False)
    prices = {o["plan"]: (o["price_usd"], o["fits"]) for o in data["options"]}
    assert prices["7d"] == (110.0, True) and prices["2x3d"] == (94.28, True)
    assert prices["reduced"] == (47.14, True)


def test_plan_text_of_the_shipped_example_reads_in_80_columns(tmp_path):
    r = campaign("plan", str(ROOT / "examples" / "rank-ablation"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert "38 h committed of 72 h" in r.stdout and "34 h uncommitted" in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes into a pipe


def test_check_of_the_shipped_example(tmp_path):
    r = campaign("check", str(ROOT / "examples" / "rank-ablation" / "campaign.toml"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "variants  3 (2 essential, 1 exploratory)" in r.stdout


def test_every_shipped_example_checks_and_plans(tmp_path):
    examples = sorted((ROOT / "examples").glob("*/campaign.toml"))
    assert len(examples) >= 2
    for path in examples:
        r = campaign("check", str(path), cwd=tmp_path)
        assert r.returncode == 0, (path, r.stderr)
        r = campaign("plan", str(path.parent), "--json", cwd=tmp_path)
        assert r.returncode == 0, (path, r.stderr)
        assert "committed_hours" in json.loads(r.stdout)
        r = campaign("plan", str(path.parent), cwd=tmp_path)
        assert r.returncode == 0 and max(map(len, r.stdout.splitlines())) <= 80, r.stdout


def test_the_b200_example_runs_two_side_by_side_and_shows_the_options(tmp_path):
    r = campaign("plan", str(ROOT / "examples" / "b200-sweep"), "--json", cwd=tmp_path)
    data = json.loads(r.stdout)
    assert data["gpus"] == 2 and data["price_usd"] == 520.0 and not data["fits"]
    first = {i["name"]: i for i in data["items"] if i["kind"] == "variant"}
    assert first["control"]["start_hours"] == first["lr-high"]["start_hours"]
    assert {first["control"]["gpu"], first["lr-high"]["gpu"]} == {0, 1}
    opts = {o["plan"]: o for o in data["options"]}
    assert opts["7d"]["price_usd"] is None  # no invented price
    assert opts["2x3d"]["price_usd"] == 1040.0


def test_check_warns_about_an_adapter_without_its_base_revision(tmp_path):
    assert campaign("init", cwd=tmp_path).returncode == 0
    path = tmp_path / "campaign.toml"
    path.write_text(path.read_text().replace("# adapter = true ", "adapter = true ", 1))
    r = campaign("check", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "control is an adapter without base_revision" in r.stdout


def test_check_warns_when_a_step_rule_can_never_be_judged(tmp_path, capsys):
    """A regex without a step group leaves `below`/`above` rules waiting for ever: say so up front."""
    from runner.cli import main

    src = (Path(__file__).resolve().parents[1] / "examples" / "rank-ablation" / "campaign.toml").read_text()
    src = src.replace(
        'checkpoint_every = "30m"\n',
        "checkpoint_every = \"30m\"\nmetrics_regex = 'loss (?P<loss>\\S+) acc (?P<dev_acc>\\S+)'\n",
        1,
    )
    (tmp_path / "campaign.toml").write_text(src)
    assert main(["check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "control's metrics_regex has no (?P<step>...) group" in out and "below" in out


def test_init_starts_the_window_at_the_current_hour_never_later():
    """An unedited start must put the deadlines early, not late."""
    import datetime as dt

    from runner.cli.plan_cmds import template_text

    now = dt.datetime(2026, 11, 29, 9, 59, 30, tzinfo=dt.UTC)
    assert "started_at = 2026-11-29T09:00:00Z" in template_text("x", now=now)


def test_a_window_past_its_retrieval_deadline_is_never_said_to_need_no_other_plan(tmp_path):
    import time

    from tests.helpers_runner import write_campaign

    write_campaign(tmp_path / "late", [{"name": "a"}], started_at=time.time() - 10 * 86400)
    plan = campaign("plan", "late", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    text = " ".join(plan.stdout.split())
    assert "the retrieval deadline has passed: nothing more runs in this window" in text
    assert "no other plan needed" not in text
    check = campaign("check", "late", cwd=tmp_path)
    assert "note      the retrieval deadline has passed" in check.stdout
