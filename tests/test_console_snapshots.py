"""Snapshot tests of every screen and dialog of the console (tests/fixtures/shots.py SHOTS): the
demo scene and its variants (fixed data, fixed clock, recorded NVML answers) at 80x24 (and the main
screen at 120x30, 60x20 and, over several hosts, 100x30), and the report screen on the demo at its
close, compared as text with the stored renderings in tests/console_snapshots/. After an
intended change: CONSOLE_SNAPSHOTS_UPDATE=1 pytest this file, then read the diff."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fixtures import shots

STORED = Path(__file__).parent / "console_snapshots"
UPDATE = os.environ.get("CONSOLE_SNAPSHOTS_UPDATE") == "1"
PLACEHOLDER = "/tmp/ccsnap-XXXXXXXX/demo"
CLOSING_PLACEHOLDER = "/tmp/ccsnap-XXXXXXXX/done"


@pytest.fixture(scope="module")
def scenes():
    # paths of fixed length: the retrieval and report screens wrap by them
    base = Path(tempfile.mkdtemp(prefix="ccsnap-", dir="/tmp"))
    folder, closing = base / "demo", base / "done"
    assert len(str(folder)) == len(PLACEHOLDER) == len(str(closing))
    shots.write_scene(folder)
    shots.write_variant_files(folder)
    yield folder, closing
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def closing(scenes):
    """The closed campaign (real checkpoints: written in a child process) only when a test needs it."""
    shots.build_closing_scene(scenes[1])
    return scenes[1]


@pytest.fixture
def scene(scenes):
    return scenes[0]


@pytest.mark.parametrize("name", list(shots.SHOTS))
async def test_screen_matches_stored(scene, name, tmp_path, request):
    shot = shots.SHOTS[name]
    folder = request.getfixturevalue("closing") if shot.level in shots.CLOSED_LEVELS else scene
    text = await shots.shoot(name, shot, folder, tmp_path)
    text = text.replace(str(scene), PLACEHOLDER).replace(str(folder.parent / "done"), CLOSING_PLACEHOLDER)
    svg = (tmp_path / f"{name}.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    stored = STORED / f"{name}.txt"
    if UPDATE or not stored.exists():
        stored.write_text(text + "\n", encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"no stored rendering for {name}: wrote {stored}; read it and run again")
    assert text + "\n" == stored.read_text(encoding="utf-8")


def test_report_markdown_renders_as_a_page(closing):
    svg = shots.report_markdown_svg(closing)
    assert svg.startswith("<svg") and "Closing" in svg and "23.57" in svg


async def test_same_scene_draws_the_same_twice(scene, tmp_path):
    a = await shots.shoot("main-warning", shots.SHOTS["main-warning"], scene, None)
    b = await shots.shoot("main-warning", shots.SHOTS["main-warning"], scene, None)
    assert a == b and "WARNING" in a
