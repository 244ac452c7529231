"""The campaign file model: every field's default, and every class of bad input named by file,
line and field (issue 2, point 2)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from runner.campaign.durations import format_duration, parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.model import load_campaign

GOOD = """\
[campaign]
name = "rank-ablation"
question = "Does rank 16 beat the control?"

[bundle]
provider = "IteraGPU"
gpu = "RTX 4090"
days = 3
started_at = 2026-11-29T09:00:00Z

[[phase]]
name = "setup"
hours = 3

[[phase]]
name = "main runs"
variants = ["control", "rank16"]

[[phase]]
name = "analysis"
hours = 2
uses = "host"

[[variant]]
name = "control"
category = "essential"
command = ["python", "train.py"]
hours = 10
checkpoint_every = "30m"

[[variant]]
name = "rank16"
category = "useful"
command = ["python", "train.py", "--rank", "16"]
hours = 10

[[rule]]
kind = "nonfinite"

[[rule]]
kind = "stalled"
within = "15m"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth line containing `needle`."""
    hits = [n for n, line in enumerate(text.splitlines(), start=1) if needle in line]
    return hits[nth]


def error_for(tmp_path: Path, text: str) -> CampaignError:
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, text))
    return info.value


def assert_names(err: CampaignError, path_field: str, line: int | None) -> None:
    msg = str(err)
    assert err.field == path_field, msg
    assert f"field '{path_field}'" in msg
    assert "campaign.toml" in msg
    if line is not None:
        assert err.line == line, msg
        assert f"campaign.toml:{line}:" in msg


def test_the_good_file_loads_with_every_default(tmp_path):
    c = load_campaign(write(tmp_path, GOOD))
    assert c.output_dir == "deliverables" and c.decision is None and c.spend == ()
    b = c.bundle
    assert (b.price_usd, b.price_from_catalog, b.gpus, b.retrieval_hours, b.warn_hours) == (47.14, True, 1, 2.0, 12.0)
    assert b.started_at == dt.datetime(2026, 11, 29, 9, tzinfo=dt.UTC)
    assert b.expires_at - b.started_at == dt.timedelta(days=3)
    setup = c.phases[0]
    assert (setup.uses, setup.with_, setup.before_window, setup.variants) == ("gpu", None, False, ())
    v = c.variant("rank16")
    assert (v.gpus, v.checkpoint_every_s, v.resume_command, v.expects, v.env, v.adapter) == (
        1,
        None,
        None,
        (),
        (),
        False,
    )
    assert c.variant("control").checkpoint_every_s == 1800
    assert c.rules[0].metric == "loss" and c.rules[1].within_s == 900
    assert c.rules_for("control") == c.rules


def test_a_folder_is_read_as_its_campaign_toml(tmp_path):
    write(tmp_path, GOOD)
    assert load_campaign(tmp_path).name == "rank-ablation"


def test_a_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(CampaignError, match="campaign init"):
        load_campaign(tmp_path)


def test_toml_syntax_errors_name_the_line(tmp_path):
    text = GOOD.replace("hours = 3\n", "hours = = 3\n")
    err = error_for(tmp_path, text)
    assert err.line == line_of(text, "hours = = 3") and "not valid TOML" in str(err)


@pytest.mark.parametrize(
    "old,new,field,needle",
    [
        # unknown keys, in each kind of table
        ("days = 3\n", 'days = 3\ncolour = "red"\n', "bundle.colour", "colour"),
        ('name = "analysis"\n', 'name = "analysis"\nhour = 2\n', "phase[2].hour", "hour = 2"),
        (
            'checkpoint_every = "30m"\n',
            'checkpoint_every = "30m"\nlearning_rate = 0.1\n',
            "variant[0].learning_rate",
            "learning_rate",
        ),
        ('within = "15m"\n', 'within = "15m"\nthreshold = 2\n', "rule[1].threshold", "threshold"),
        ("[campaign]\n", '[campaign]\nowner = "me"\n', "campaign.owner", "owner"),
        # wrong types
        ("hours = 10\n", 'hours = "ten"\n', "variant[0].hours", 'hours = "ten"'),
        ("days = 3\n", 'days = "3"\n', "bundle.days", 'days = "3"'),
        (
            'command = ["python", "train.py"]\n',
            'command = "python train.py"\n',
            "variant[0].command",
            'command = "python',
        ),
        (
            'command = ["python", "train.py"]\n',
            'command = ["python", 3]\n',
            "variant[0].command",
            'command = ["python", 3]',
        ),
        ("hours = 3\n", "hours = true\n", "phase[0].hours", "hours = true"),
        # unknown categories, rule kinds, phase uses
        ('category = "useful"\n', 'category = "nice-to-have"\n', "variant[1].category", "nice-to-have"),
        ('kind = "nonfinite"\n', 'kind = "nan"\n', "rule[0].kind", 'kind = "nan"'),
        ('uses = "host"\n', 'uses = "cpu"\n', "phase[2].uses", 'uses = "cpu"'),
        # durations that do not parse
        (
            'checkpoint_every = "30m"\n',
            'checkpoint_every = "30 minutes"\n',
            "variant[0].checkpoint_every",
            "30 minutes",
        ),
        ('within = "15m"\n', 'within = "soon"\n', "rule[1].within", '"soon"'),
        ('checkpoint_every = "30m"\n', 'checkpoint_every = "0s"\n', "variant[0].checkpoint_every", '"0s"'),
        # duplicate or ill-formed variant names
        ('name = "rank16"\n', 'name = "control"\n', "variant[1].name", ('name = "control"', 1)),
        ('name = "rank16"\n', 'name = "Rank 16"\n', "variant[1].name", "Rank 16"),
        # a phase naming a variant that does not exist
        ('variants = ["control", "rank16"]\n', 'variants = ["control", "rank32"]\n', "phase[1].variants", "rank32"),
        # a catalog entry without a price, and no price_usd
        ('gpu = "RTX 4090"\n', 'gpu = "B200"\n', "bundle.price_usd", None),
        # a gpu the catalog does not sell, and a period it does not sell
        ('gpu = "RTX 4090"\n', 'gpu = "H100"\n', "bundle.gpu", 'gpu = "H100"'),
        ("days = 3\n", "days = 5\n", "bundle.days", "days = 5"),
        # two phases declared `with` each other that need the same GPU
        ('name = "main runs"\n', 'name = "main runs"\nwith = "setup"\n', "phase[1].with", 'with = "setup"'),
        (
            'variants = ["control", "rank16"]\n',
            'variants = ["control", "control"]\n',
            "phase[1].variants",
            '"control", "control"',
        ),
        # a misspelt table at the top level, and a catalog file that is not there
        ('[[rule]]\nkind = "nonfinite"\n', '[[rules]]\nkind = "nonfinite"\n', "rules", "[[rules]]"),
        ("days = 3\n", 'days = 3\ncatalog = "mine.toml"\n', "bundle.catalog", "mine.toml"),
        # a rule limited to a variant that does not exist
        ('within = "15m"\n', 'within = "15m"\nvariants = ["rank64"]\n', "rule[1].variants", "rank64"),
        # required keys
        ('question = "Does rank 16 beat the control?"\n', "", "campaign.question", "[campaign]"),
        ("hours = 10\n", "", "variant[0].hours", None),
    ],
)
def test_bad_input_names_file_line_and_field(tmp_path, old, new, field, needle):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    err = error_for(tmp_path, text)
    if isinstance(needle, tuple):
        line = line_of(text, *needle)
    else:
        line = line_of(text, needle) if needle else None
    assert_names(err, field, line)


def test_a_b200_without_price_usd_is_an_error_naming_price_usd(tmp_path):
    text = GOOD.replace('gpu = "RTX 4090"\n', 'gpu = "B200"\n')
    err = error_for(tmp_path, text)
    assert "price_usd" in str(err) and err.field == "bundle.price_usd"
    c = load_campaign(write(tmp_path, text.replace("days = 3\n", "days = 3\nprice_usd = 520.0\n")))
    assert (c.bundle.gpus, c.bundle.price_usd, c.bundle.price_from_catalog) == (2, 520.0, False)


def test_with_chains_that_put_two_gpu_phases_together_are_refused(tmp_path):
    text = GOOD.replace('uses = "host"\n', 'uses = "host"\nwith = "setup"\n').replace(
        'name = "main runs"\n', 'name = "main runs"\nwith = "analysis"\n'
    )
    err = error_for(tmp_path, text)
    assert err.field == "phase[1].with" and "'setup' and 'main runs'" in str(err)


def test_with_loops_are_refused(tmp_path):
    text = (
        GOOD.replace('uses = "host"\n', 'uses = "host"\nwith = "notes"\n')
        + '\n[[phase]]\nname = "notes"\nhours = 1\nuses = "human"\nwith = "analysis"\n'
    )
    err = error_for(tmp_path, text)
    assert err.field == "phase[2].with" and "loop" in str(err)


def test_with_naming_an_unknown_phase_is_refused(tmp_path):
    text = GOOD.replace('uses = "host"\n', 'uses = "host"\nwith = "lunch"\n')
    err = error_for(tmp_path, text)
    assert_names(err, "phase[2].with", line_of(text, 'with = "lunch"'))


def test_preparation_before_the_window_must_be_human_and_cannot_overlap_the_window(tmp_path):
    err = error_for(tmp_path, GOOD.replace("hours = 3\n", "hours = 3\nbefore_window = true\n"))
    assert err.field == "phase[0].before_window"
    text = GOOD + '\n[[phase]]\nname = "reading"\nhours = 1\nuses = "human"\nbefore_window = true\nwith = "setup"\n'
    assert error_for(tmp_path, text).field == "phase[3].with"


def test_durations():
    assert parse_duration("90s") == 90 and parse_duration("1h30m") == 5400 and parse_duration("1.5h") == 5400
    for bad in ("", "5", "m", "-5m", "5x", "5 m x"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert format_duration(3725) == "1:02:05" and format_duration(None) == "-"


def test_the_shipped_template_loads_cleanly(tmp_path):
    from importlib import resources

    from runner.campaign.model import parse_campaign

    text = resources.files("runner.campaign").joinpath("template.toml").read_text(encoding="utf-8")
    c = parse_campaign(text, tmp_path / "campaign.toml")
    assert [v.name for v in c.variants] == ["control", "variant"] and c.decision.control == "control"
    assert text.count("\n#") + text.count("  #") > 20  # it explains itself
