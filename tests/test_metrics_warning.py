"""A `metrics_regex` that matches every line yet parses no number (one written for the HF
Trainer 4.x, on 5.x's quoted values) is said plainly: in `campaign check` before anything runs,
and, once it happens, in `campaign status` (text and `--json`), the console's runs table and run
detail. Regression: status showed `lines 0, bad_lines 0` and no warning; only output.log said so."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from helpers_console import run_row, tick_until

from console.app import make_app
from console.screens.run_detail import RunDetailScreen
from console.widgets.runs.runs_table import RunsTable
from runner.cli import main as cli_main
from runner.daemon import client
from runner.daemon.nvml import Nvml
from tests.fixtures.console_nvml import NVMLError_LibraryNotFound, RecordedNvml
from tests.fixtures.screen_text import screen_text
from tests.helpers_runner import wait_for, write_campaign

# what HF Trainer 5.x prints: quoted values, no step
HF5_SCRIPT = r"""
import sys, time
for i in range(int(sys.argv[1])):
    print({'loss': f'{5.381 - i * 0.01:.3f}', 'grad_norm': '1.28', 'learning_rate': '5e-05', 'epoch': f'{i / 100:.2f}'}, flush=True)
    time.sleep(float(sys.argv[2]))
time.sleep(600)
"""
OLD_REGEX = "'loss': (?P<loss>[0-9.]*)"  # written for 4.x's `'loss': 5.381`: matches 5.x, parses nothing


def hf5_campaign(root, regex: str = OLD_REGEX):
    write_campaign(root, [{"name": "hf5", "n": 12, "delay": 0.02, "extra": f'metrics_regex = "{regex}"\n'}])
    (root / "steps.py").write_text(HF5_SCRIPT)  # the variant's command runs steps.py N DELAY
    return root


@pytest.mark.slow
async def test_regex_matching_lines_without_numbers_is_a_warning_in_status_and_console(tmp_path, live_runner, capsys):
    root = hf5_campaign(tmp_path / "camp")
    c = live_runner(root, slots=1)
    run = wait_for(
        lambda: (r := next(iter(client.request(c, "status")["runs"]), None)) and r.get("metrics_warning") and r,
        timeout=60,
        what="the metrics warning in status",
    )
    assert run["state"] == "running" and run["lines"] == 0 and run["loss"] is None
    assert run["matched_no_numbers"] >= 3
    assert "lines matched metrics_regex but gave no numbers" in run["metrics_warning"]
    assert "named groups" in run["metrics_warning"]

    # campaign status --json: typed fields; the text view says it under the run
    assert cli_main(["status", str(root), "--json"]) == 0
    snap = json.loads(capsys.readouterr().out)
    row = snap["runs"][0]
    assert row["matched_no_numbers"] >= 3 and "gave no numbers" in row["metrics_warning"]
    assert cli_main(["status", str(root)]) == 0
    text = capsys.readouterr().out
    assert "warning: metrics:" in text and "gave no numbers" in text

    # the console: the runs table's loss cell and the run detail, through the runner's deltas
    no_driver = Nvml(backend=RecordedNvml(fail_init=NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found")))
    app = make_app(campaign=c, nvml=no_driver, auto_tick=False, use_user_keymap=False, tz=dt.UTC)
    async with app.run_test(size=(100, 30)) as pilot:
        await tick_until(app, pilot, lambda: (r := run_row(app, "hf5")) and r.get("metrics_warning"), what="warning")
        table = app.main_screen.query_one(RunsTable)
        assert table.cell_text(run["id"], "loss") == "⚠ none"
        screen = RunDetailScreen(run["id"])
        await app.push_screen(screen)
        config = await tick_until(
            app,
            pilot,
            lambda: "gave no numbers" in (t := screen_text(app)) and t,
            what="the warning in the run detail",
        )
        words = " ".join(config.split())  # the warning wraps in its column
        assert re.search(r"warning metrics: \d+ lines matched metrics_regex", words) and "named groups" in words


def test_a_regex_that_parses_the_lines_says_nothing(tmp_path):
    from runner.supervision.line_parsers import RegexMetrics, empty_match_warning

    good = RegexMetrics(r"'loss': '?(?P<loss>[-+.0-9eE]+)")
    block = "".join(f"{{'loss': '{5 - i / 10:.3f}', 'grad_norm': '1.2'}}\n" for i in range(10)).encode()
    recs, _ = good.parse_block(block)
    assert len(recs) == 10 and good.matched_empty == 0
    assert empty_match_warning(good.matched_empty, len(recs)) is None
    assert empty_match_warning(40, 1) is None  # a regex that also matches other output, while its metric lines parse
    bad = RegexMetrics(OLD_REGEX)
    recs, _ = bad.parse_block(block)
    assert recs == [] and bad.matched_empty == 10
    assert empty_match_warning(bad.matched_empty, 0) == (
        "metrics: 10 lines matched metrics_regex but gave no numbers: check its named groups, "
        'e.g. (?P<loss>[-+.0-9eE]+); HF Trainer lines: metrics_format = "hf"'
    )


def test_check_names_a_regex_that_can_give_no_numbers_by_file_line_and_field(tmp_path, capsys):
    root = tmp_path / "camp"
    variants = [
        {"name": "hf5", "extra": f'metrics_regex = "{OLD_REGEX}"\n'},
        {"name": "words", "extra": 'metrics_regex = "loss (?P<loss>[a-z]+)"\n'},
        {"name": "good", "extra": "metrics_regex = \"'loss': '?(?P<loss>[-+.0-9eE]+)\"\n"},
        {"name": "stepped", "extra": 'metrics_regex = "iter (?P<step>\\\\d+)"\n'},
        {"name": "hf", "extra": 'metrics_format = "hf"\n'},
    ]
    path = write_campaign(root, variants)
    lines = path.read_text().splitlines()
    line_of = {
        v: next(n for n, t in enumerate(lines, 1) if t.startswith("metrics_regex") and n > start)
        for v, start in ((v, lines.index(f'name = "{v}"') + 1) for v in ("hf5", "words", "stepped"))
    }
    assert cli_main(["check", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        f"warning   {path}:{line_of['hf5']}: field 'variant[0].metrics_regex' (hf5): group 'loss' can match "
        "nothing at all"
    ) in out
    assert (
        f"warning   {path}:{line_of['words']}: field 'variant[1].metrics_regex' (words): none of its named "
        "groups (loss) can hold a number"
    ) in out
    assert f"{path}:{line_of['stepped']}: field 'variant[3].metrics_regex' (stepped): it has only a (?P<step>" in out
    assert "(good)" not in out and "(hf)" not in out and "in runs/" not in out

    # an earlier run of the variant already printed HF 5.x lines: check says what they gave
    run_dir = root / "runs" / "hf5-0123abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "output.log").write_text(
        "".join(f"{{'loss': '{5 - i / 10:.3f}', 'grad_norm': '1.2', 'epoch': '0.0{i}'}}\n" for i in range(9))
    )
    (root / "runs" / "good-4567cdef").mkdir()
    (root / "runs" / "good-4567cdef" / "output.log").write_text((run_dir / "output.log").read_text())
    assert cli_main(["check", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "warning   hf5: in runs/hf5-0123abcd/output.log, metrics: 9 lines matched metrics_regex but gave no numbers"
    ) in out
    assert "good: in runs/" not in out


def test_group_patterns_reads_classes_escapes_and_nesting():
    from runner.supervision.line_parsers import parse_number
    from runner.supervision.regex_check import NUMBER_SPELLINGS, group_patterns, regex_findings

    assert all(parse_number(s) is not None for s in NUMBER_SPELLINGS)
    assert group_patterns(r"a\((?P<x>[()\]]+)\) (?P<y>(?:\d+)(?P<z>\.\d*)?)") == {
        "x": r"[()\]]+",
        "y": r"(?:\d+)(?P<z>\.\d*)?",
        "z": r"\.\d*",
    }
    assert regex_findings(r"step (?P<step>\d+) loss (?P<loss>\S+)") == []
    assert regex_findings(r"(?i)LOSS=(?P<loss>NAN|[0-9.]+)") == []  # the regex's flags apply to its groups
    assert [f.text for f in regex_findings(r"loss (?P<loss>\d+) tag (?P<tag>[a-z]+)")] == [
        "group 'tag' can never hold a number: it is never recorded"
    ]


def test_the_count_survives_a_runner_restart_and_a_failed_write(tmp_path):
    """The watcher adds each batch's count with the offset it stored: a restarted runner goes on
    from there (nothing counted twice), and a batch the ledger could not store is counted again."""
    from runner.daemon.status import run_row
    from runner.daemon.watcher import RunWatch
    from runner.ledger import store as L

    run_dir = tmp_path / "runs" / "hf5-00000001"
    run_dir.mkdir(parents=True)
    led = L.Ledger(tmp_path / "l.sqlite")
    run = {"id": "hf5-00000001", "variant": "hf5", "category": "essential", "config_hash": "00000001"}
    run |= {"state": "running", "run_dir": str(run_dir), "planned_hours": 1, "attempts": 1}
    led.insert_run(run)
    log = run_dir / "output.log"
    line = "{'loss': '5.381', 'grad_norm': '1.28'}\n"
    log.write_text("starting\n" + line * 4)
    w = RunWatch(led, led.run(run["id"]), root=tmp_path, metrics_regex=OLD_REGEX, checkpoint_glob=None)
    assert w.poll()
    prog = L.progress(led.conn)["hf5-00000001"]
    assert (prog["matched_no_numbers"], prog["lines"], prog["offset"]) == (4, 0, log.stat().st_size)

    with log.open("a") as f:
        f.write(line * 3)
    real = led.record_metrics

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    led.record_metrics = full_disk  # type: ignore[method-assign]
    with pytest.raises(OSError):
        w.poll()
    led.record_metrics = real  # type: ignore[method-assign]
    assert w.poll()  # read again, counted once
    w.close()
    assert L.progress(led.conn)["hf5-00000001"]["matched_no_numbers"] == 7

    with log.open("a") as f:
        f.write(line * 2 + "{'loss': 'nan'}\n")
    offset = L.progress(led.conn)["hf5-00000001"]["offset"]
    w2 = RunWatch(led, led.run(run["id"]), root=tmp_path, metrics_regex=OLD_REGEX, checkpoint_glob=None, offset=offset)
    w2.poll()
    w2.close()
    prog = L.progress(led.conn)["hf5-00000001"]
    assert prog["matched_no_numbers"] == 10
    row = run_row(L.get_run(led.conn, run["id"]), None, {}, prog, [], 0.0)
    assert row.matched_no_numbers == 10 and row.metrics_warning is not None
    assert row.metrics_warning.startswith("metrics: 10 lines matched metrics_regex but gave no numbers")
