"""The runs table at a thousand runs: running runs and the most recently ended listed first, the
rest counted under the table, a filter key (remappable like every other) that finds any run; and
a change to one run costs one row, not the table."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from console.app import make_app  # noqa: E402
from console.screens.filter_dialog import FilterDialog  # noqa: E402
from console.source import SnapshotSource  # noqa: E402
from console.widgets.runs.runs_note import RunsNote  # noqa: E402
from console.widgets.runs.runs_table import RunsTable  # noqa: E402
from console.widgets.runs.selection import SHOW_MAX, RunSelection  # noqa: E402
from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon.nvml import Nvml  # noqa: E402
from tests.fixtures.console_nvml import RTX4090, RecordedNvml
from tests.fixtures.scene import NOW, snapshot, write_scene

ENDED = 1_000


def _big_snapshot(folder: Path) -> dict:
    snap = snapshot(folder, NOW + 20)
    stopped = next(r for r in snap["runs"] if r["state"] == "stopped")
    extra = []
    for i in range(ENDED):
        state = "failed" if i % 100 == 7 else "finished"
        extra.append(
            {**stopped, "id": f"old-{i:05d}", "variant": "lr-x3", "state": state, "ended_at": NOW - 10_000 + i}
        )
    snap["runs"] = extra + snap["runs"]  # the ended ones were launched first
    return snap


def _app(folder: Path, snap: dict, keymap: dict | None = None):
    return make_app(
        SnapshotSource(snap),
        campaign=load_campaign(folder / "campaign.toml"),
        nvml=Nvml(backend=RecordedNvml(devices=[RTX4090])),
        clock=lambda: NOW + 20,
        auto_tick=False,
        tz=dt.UTC,
        keymap=keymap,
        use_user_keymap=False,
    )


def test_selection_lists_active_then_recent_and_counts_the_rest() -> None:
    sel = RunSelection(cap=5)
    for i in range(10):
        sel.put({"id": f"e{i}", "state": "finished", "ended_at": float(i)})
    sel.put({"id": "r1", "state": "running"})
    assert sel.visible() == ["r1", "e9", "e8", "e7", "e6"]
    assert "6 older ended runs not listed" in (sel.note(5) or "")
    version = sel.version
    sel.put({"id": "e3", "state": "finished", "ended_at": 3.0})  # the same again: nothing moves
    assert sel.version == version
    sel.put({"id": "r1", "state": "failed", "ended_at": 20.0, "stop_reason": "oom"})
    assert sel.visible()[0] == "r1" and sel.version > version
    sel.set_filter("oom")
    assert sel.visible() == ["r1"] and "1 of 11 runs match" in (sel.note(1) or "")
    sel.set_filter("state:finished variant:nope")
    assert sel.visible() == []
    sel.set_filter("")
    assert len(sel.visible()) == 5


def test_a_full_state_at_once_lists_what_one_run_at_a_time_lists() -> None:
    """`put_all` (a full state: one pass and one sort) and `put` run by run end in the same list,
    with a filter and after a reconnect's second full state."""
    runs = [
        {"id": f"r{i:03d}", "state": ("running", "finished", "failed", "queued")[i % 4], "ended_at": float(i * 7 % 13)}
        for i in range(40)
    ]
    one, bulk = RunSelection(cap=9), RunSelection(cap=9)
    for run in runs:
        one.put(run)
    bulk.put_all(runs)
    assert bulk.visible() == one.visible() and bulk.note(9) == one.note(9)
    moved = [{**runs[1], "state": "running", "ended_at": None}, {"id": "new", "state": "failed", "ended_at": 99.0}]
    for run in moved:
        one.put(run)
    bulk.put_all(moved)  # a reconnect: runs not in it keep their rows
    assert bulk.visible() == one.visible() and len(bulk.rows) == 41
    for sel in (one, bulk):
        sel.set_filter("state:failed")
    assert bulk.visible() == one.visible() and bulk.visible()[0] == "new"


async def test_filter_key_finds_runs_among_a_thousand(tmp_path) -> None:
    write_scene(tmp_path / "demo")
    snap = _big_snapshot(tmp_path / "demo")
    app = _app(tmp_path / "demo", snap)
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.pause()
        table = app.main_screen.query_one(RunsTable)
        note = app.main_screen.query_one(RunsNote)
        assert table.row_count == SHOW_MAX
        keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(3)]
        assert keys == ["control-3f9a1c20", "lr-x3-8be01d47", "lr-x1000-c0ffee11"]  # running first
        assert table.coordinate_to_cell_key((3, 0)).row_key.value == f"old-{ENDED - 1:05d}"  # then newest ended
        assert note.has_class("-shown") and "803 older ended runs not listed" in str(note.render())

        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, FilterDialog)
        await pilot.press(*"state:failed", "enter")
        await pilot.pause()
        failed = {r["id"] for r in snap["runs"] if r["state"] == "failed"}
        assert set(table.rows) == {k for k in table.rows if k.value in failed} and table.row_count == len(failed)
        assert "10 of 1,003 runs match" in str(note.render())

        # a change to one run costs that row
        made = table.cells_made
        row = {**snap["runs"][7], "stop_reason": "CUDA out of memory"}
        table.show([row])
        assert table.cells_made - made == 1
        assert row["id"] in failed and "CUDA out of memory" in table.cell_text(row["id"], "rules")

        await pilot.press("slash")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", "enter")  # empty: every run again
        await pilot.pause()
        assert table.row_count == SHOW_MAX


async def test_rows_below_the_fold_are_added_after_the_first_frame(tmp_path) -> None:
    """A full state lays out a screen's height of rows at once, the rest of the listed ones
    right after that frame; a run selected among those keeps the cursor across a new layout."""
    write_scene(tmp_path / "demo")
    snap = _big_snapshot(tmp_path / "demo")
    app = _app(tmp_path / "demo", snap)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.main_screen.query_one(RunsTable)
        table.show(snap["runs"], full=True)
        assert table.row_count == 30  # what a 30-line screen can show, not SHOW_MAX
        await pilot.pause()
        assert table.row_count == SHOW_MAX
        table.move_cursor(row=150, animate=False)
        chosen, shape = table.selected_run, table._shape
        await pilot.resize_terminal(140, 30)  # a wider layout: the rows are laid out again
        await pilot.pause()
        assert table._shape != shape
        assert table.row_count == SHOW_MAX and table.selected_run == chosen


async def test_filter_key_follows_the_user_keymap(tmp_path) -> None:
    write_scene(tmp_path / "demo")
    snap = _big_snapshot(tmp_path / "demo")
    app = _app(tmp_path / "demo", snap, keymap={"filter": "f2"})
    async with app.run_test(size=(100, 30)) as pilot:
        await app.tick()
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, FilterDialog)
        await pilot.press(*"old-00042", "enter")
        await pilot.pause()
        assert list(app.main_screen.query_one(RunsTable).rows)[0].value == "old-00042"
