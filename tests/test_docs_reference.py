"""The reference pages keep up with the code: docs/CLI.md names every subcommand argparse knows
with each of its long options and every key the `--json` outputs emit on a real campaign (a live
runner for `status`); docs/CAMPAIGN_FILE.md documents every key the loader accepts (the very sets
it checks files against), its full example loads and uses them; README and `--help` link both."""

from __future__ import annotations

import json
import re
import time
import tomllib
from pathlib import Path

import pytest
from helpers_runner import wait_for, write_campaign

from runner.campaign.errors import CampaignError
from runner.campaign.model import parse_campaign
from runner.campaign.objects import RULE_KEYS, known_keys
from runner.cli import build_parser
from runner.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
FILE_MD = (ROOT / "docs" / "CAMPAIGN_FILE.md").read_text(encoding="utf-8")


def section(text: str, heading: str, level: str = "###") -> str:
    """The text under the first heading starting with `heading`, up to the next heading of its level."""
    m = re.search(
        rf"^{level} {re.escape(heading)}.*?$(.*?)(?=^{level} |^#{{1,{len(level) - 1}}} |\Z)", text, re.M | re.S
    )
    assert m, f"no heading {level} {heading}"
    return m.group(1)


def subcommands() -> dict[str, list[str]]:
    """Every subcommand and its long options, as argparse knows them."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]  # argparse keeps no public list
    return {
        name: sorted({o for a in p._actions for o in a.option_strings if o.startswith("--") and o != "--help"})
        for name, p in sub.choices.items()
    }


def test_every_subcommand_and_long_option_is_in_cli_md():
    commands = subcommands()
    assert len(commands) >= 20
    for name, options in commands.items():
        text = section(CLI_MD, f"`campaign {name}")
        assert "Exit:" in text, f"campaign {name}: no exit codes"
        for option in options:
            assert f"`{option}" in text, f"campaign {name} {option} is not in docs/CLI.md"


def test_every_json_section_names_an_existing_flag():
    commands = subcommands()
    for heading in re.findall(r"^### `([a-z-]+) --json`", CLI_MD, re.M):
        assert "--json" in commands[heading], heading


def test_every_key_the_loader_accepts_is_in_campaign_file_md():
    headings = {"file": None, "campaign": "`[campaign]`", "decision": "`[decision]`", "bundle": "`[bundle]`"}
    headings |= {"host": "`[[host]]`", "phase": "`[[phase]]`", "pilot": "`[pilot]`", "variant": "`[[variant]]`"}
    headings |= {"rule": "`[[rule]]`", "spend": "`[[spend]]`", "notify": "`[notify]`"}
    keys = known_keys()
    assert set(keys) == set(headings)
    for table in keys["file"]:
        assert re.search(rf"^## `\[{{1,2}}{table}\]{{1,2}}`", FILE_MD, re.M), f"no section for [{table}]"
    for table, keyset in keys.items():
        if table == "file":
            continue
        text = section(FILE_MD, headings[table], "##")
        for key in keyset:
            assert f"`{key}`" in text, f"[{table}] {key} is not in docs/CAMPAIGN_FILE.md"
    rules = section(FILE_MD, "`[[rule]]`", "##")
    for kind, kind_keys in RULE_KEYS.items():
        row = next(line for line in rules.splitlines() if line.startswith(f"| `{kind}` |"))
        assert all(f"`{k}`" in row for k in kind_keys), kind


def _unknown_key_error(text: str) -> set[str]:
    with pytest.raises(CampaignError) as err:
        parse_campaign(text, Path("/nowhere/campaign.toml"))
    known = re.search(r"unknown key 'zz_unknown' \(known: (.*)\)", str(err.value))
    assert known, str(err.value)
    return set(known.group(1).split(", "))


def test_known_keys_are_what_the_loader_enforces():
    """Each table's unknown-key error lists exactly `known_keys()`: the docs test reads the loader's list."""
    example = _examples()[0]
    keys = known_keys()
    for table in ("campaign", "decision", "bundle", "pilot", "notify"):
        text = example.replace(f"[{table}]\n", f"[{table}]\nzz_unknown = 1\n", 1)
        assert _unknown_key_error(text) == keys[table], table
    for table in ("phase", "variant", "spend"):
        text = example.replace(f"[[{table}]]\n", f"[[{table}]]\nzz_unknown = 1\n", 1)
        assert _unknown_key_error(text) == keys[table], table
    assert _unknown_key_error("zz_unknown = 1\n" + example) == keys["file"]
    host = _examples()[1].replace("[[host]]\n", "[[host]]\nzz_unknown = 1\n", 1)
    assert _unknown_key_error(example + host) == keys["host"]
    for kind, kind_keys in RULE_KEYS.items():
        text = example + f'\n[[rule]]\nkind = "{kind}"\nzz_unknown = 1\n'
        assert _unknown_key_error(text) == {"kind", "variants"} | kind_keys, kind


def _examples() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", section(FILE_MD, "A full example", "##"), re.S)


def test_the_full_example_loads_and_uses_every_key(tmp_path):
    one, hosts = _examples()
    single = parse_campaign(one, tmp_path / "campaign.toml")
    assert single.bundle.wrap_up_s == 45 * 60 and single.pilot.wait_s == 7200 and single.notify is not None
    both = one.replace('category = "essential"\n', 'category = "essential"\nhost = "a"\n', 1) + "\n" + hosts
    several = parse_campaign(both, tmp_path / "campaign.toml")
    assert [h.name for h in several.hosts] == ["a", "b"] and several.hosts[1].bundle.gpu == "B200"
    data = tomllib.loads(both)
    used: dict[str, set[str]] = {"file": set(data)}
    for table, value in data.items():
        rows = value if isinstance(value, list) else [value]
        used[table] = {k for row in rows for k in row}
    for table, keyset in known_keys().items():
        missing = keyset - used.get(table, set())
        if table == "host":
            missing -= known_keys()["bundle"]  # a host's bundle keys: shown once, in [bundle]
        if table == "bundle":
            missing -= {"catalog"}  # names a file of its own
        assert not missing, f"the full example never uses [{table}] {sorted(missing)}"


def test_readme_and_help_link_both_pages(capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/CLI.md)" in readme and "(docs/CAMPAIGN_FILE.md)" in readme
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    assert "docs/CLI.md" in out and "docs/CAMPAIGN_FILE.md" in out


def _json_keys(capsys, *argv: str) -> dict:
    capsys.readouterr()
    cli_main(list(argv))
    return json.loads(capsys.readouterr().out)


def _documented(keys, where: str, what: str) -> None:
    missing = sorted(k for k in keys if f"`{k}`" not in where and not k.endswith("_nonfinite"))
    assert not missing, f"{what} emits keys docs/CLI.md does not name: {missing}"


def test_status_plan_verify_and_report_json_keys_on_a_real_campaign_are_in_cli_md(tmp_path, capsys, live_runner):
    folder = tmp_path / "camp"
    write_campaign(folder, [{"name": "control", "n": 8, "delay": 0.02}, {"name": "planted", "n": 30, "nan_at": 3}])
    text = (folder / "campaign.toml").read_text()
    (folder / "campaign.toml").write_text(text.replace("[bundle]", '[bundle]\nwrap_up = "45m"', 1))
    status_md, plan_md = section(CLI_MD, "`status --json`"), section(CLI_MD, "`plan --json`")

    offline = _json_keys(capsys, "status", str(folder), "--json")
    _documented(offline, status_md, "status --json (runner down)")
    _documented(_json_keys(capsys, "plan", str(folder), "--json"), plan_md, "plan --json")

    live_runner(folder)
    snap = wait_for(
        lambda: (
            (s := _json_keys(capsys, "status", str(folder), "--json"))
            and len(s["runs"]) == 2
            and all(r["state"] not in ("queued", "running") for r in s["runs"])
            and s
        ),
        60,
        "both runs to end",
    )
    _documented(snap, status_md, "status --json")
    _documented(snap["bundle"], status_md, "status --json bundle")
    _documented(snap["runner"], status_md, "status --json runner")
    _documented(snap["runner"]["wrap_up"], section(CLI_MD, "`wrap-up --json`"), "runner.wrap_up")
    _documented(snap["pilot"], status_md, "status --json pilot")
    rows = section(CLI_MD, "A run row", "####")
    for run in snap["runs"]:
        _documented(run, rows, "a run row")
        for rule in run["rules"]:
            _documented(rule, rows, "a run row's rules")
    planted = next(r for r in snap["runs"] if r["variant"] == "planted")
    assert planted["stop_value"] is None and planted["stop_value_nonfinite"] == "nan"

    # a refusal from the runner is bad input: exit 2 and its words, no traceback
    capsys.readouterr()
    assert cli_main(["wrap-up", str(folder), "--at", "2200-01-01T00:00:00Z"]) == 2
    assert "must be before the retrieval deadline" in capsys.readouterr().err

    _documented(_json_keys(capsys, "verify", str(folder), "--json"), section(CLI_MD, "`verify --json`"), "verify")
    report = _json_keys(capsys, "report", str(folder), "--json")
    _documented(report, section(CLI_MD, "`report --json`"), "report --json")
    for row in report["planned_vs_actual"] + report["rejected"]:
        _documented(row, section(CLI_MD, "`report --json`"), "report --json rows")
    retrieval = _json_keys(capsys, "retrieval", str(folder), "--json")
    _documented(retrieval, section(CLI_MD, "`retrieval --json`"), "retrieval --json")
    _documented(retrieval["files"][0], section(CLI_MD, "`retrieval --json`"), "retrieval --json files")
    assert time.time()  # the runner is stopped by the fixture


def test_json_keys_across_hosts_are_in_cli_md(tmp_path, capsys):
    """`plan --json` with [[host]] tables, and `report --json` over DEST as `pull FILE DEST` fills it."""
    from helpers_hosts import pulled, two_host_brief

    plan = _json_keys(
        capsys, "plan", str(two_host_brief(tmp_path / "plan", variants={"control": {"host": "a"}})), "--json"
    )
    plan_md = section(CLI_MD, "`plan --json`")
    _documented(plan, plan_md, "plan --json with hosts")
    _documented(plan["hosts"][0], plan_md, "plan --json hosts")
    dest = pulled(tmp_path, {"a": [dict(variant="control", config_hash="11111111", state="failed", checkpoint=False)]})
    report = _json_keys(capsys, "report", str(dest), "--json")
    report_md = section(CLI_MD, "`report --json`")
    _documented(report, report_md, "report --json across hosts")
    for row in report["hosts"] + report["rejected"] + report["planned_vs_actual"]:
        _documented(row, report_md, "report --json across hosts, rows")
