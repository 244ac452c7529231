"""The runs table: what its cells say (compact and full), and its layout following the terminal's
width: 80 columns compact with nothing scrolling sideways, wider terminals every column in full,
a stopped run's reason kept whole (wrapped onto a second line when it is long)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from rich.text import Text

ROOT = Path(__file__).resolve().parents[1]

from console.app import make_app  # noqa: E402
from console.source import SnapshotSource  # noqa: E402
from console.widgets.runs.cells import (  # noqa: E402
    checkpoint_cell,
    hours_cell,
    id_cell,
    loss_cell,
    planned_cell,
    rules_cell,
    step_cell,
)
from console.widgets.runs.runs_table import RunsTable, fit, wrap_lines  # noqa: E402
from runner.campaign.model import load_campaign  # noqa: E402
from runner.daemon.nvml import Nvml  # noqa: E402
from tests.fixtures.console_nvml import RTX4090, RecordedNvml  # noqa: E402
from tests.fixtures.scene import NOW, snapshot, write_scene  # noqa: E402
from tests.fixtures.screen_text import screen_text  # noqa: E402


def test_compact_cells_fit_an_80_column_row():
    run = {
        "id": "control-3f9a1c20",
        "category": "essential",
        "state": "running",
        "step": 123_456,
        "loss": 12345.6,
        "elapsed_seconds": 0.4 * 3600,
        "planned_hours": 1.0,
        "expected_hours": 1.0,
        "next_checkpoint_seconds": 75.0,
    }
    assert id_cell(run, True).plain == "E control-3f9a1c20"
    assert id_cell({**run, "category": "exploratory"}, True).plain.startswith("X ")
    assert id_cell(run, False).plain == "control-3f9a1c20"
    assert step_cell(run, True).plain == "123k" and step_cell(run, False).plain == "123,456"
    assert step_cell({"step": 12_345}, True).plain == "12.3k"
    assert loss_cell(run, True).plain == "1e4"
    assert loss_cell({"loss": "nan"}, True).plain == "NaN"
    assert hours_cell(run).plain == "0.4/1.0h"
    # runs planned under an hour are counted in minutes (the demo's are minutes long)
    assert hours_cell({"elapsed_seconds": 84, "planned_hours": 0.04}).plain == "1.4/2.4m"
    assert planned_cell({"planned_hours": 0.04, "expected_hours": 0.05}, "expected_hours").plain == "3.0m"
    assert checkpoint_cell(run).plain == "1:15"


def test_overdue_checkpoint_and_overrun_are_alarms():
    late = checkpoint_cell({"state": "running", "next_checkpoint_seconds": -7.0})
    assert late.plain == "LATE 0:07" and "red" in str(late.style)
    over = hours_cell({"elapsed_seconds": 2 * 3600, "planned_hours": 1.0, "expected_hours": 2.0})
    assert over.plain == "2.0/1.0h" and "red" in str(over.style)
    expected_long = hours_cell({"elapsed_seconds": 0.5 * 3600, "planned_hours": 1.0, "expected_hours": 1.5})
    assert "yellow" in str(expected_long.style)


def test_rules_cell_says_which_rule_fired_or_why_a_run_ended():
    ok = {"state": "running", "rules": [{"kind": "nonfinite", "state": "ok"}, {"kind": "below", "state": "waiting"}]}
    assert rules_cell(ok).plain == "1/2 ok, 1 wait"
    fired = {
        "state": "running",
        "rules": [{"kind": "nonfinite", "text": "loss not finite", "state": "fired", "value": "nan"}],
    }
    assert rules_cell(fired).plain == "✗ loss not finite (nan)"
    stopped = {"state": "stopped", "stop_reason": "loss is nan at step 140", "stop_rule": "nonfinite"}
    assert rules_cell(stopped).plain == "✗ loss is nan at step 140"
    # a queued run has nothing judged yet, and no time used
    queued = {"state": "queued", "rules": ok["rules"], "elapsed_seconds": 0.0, "planned_hours": 1.0}
    assert rules_cell(queued).plain == "2 rules" and hours_cell(queued).plain == "-/1.0h"


def test_fit_and_wrap_keep_to_the_width():
    assert fit(Text("running"), 8).plain == " running "
    assert fit(Text("1,450"), 6, right=True).plain == "  1,450"
    assert fit(Text("a very long reason"), 8).plain == " a very …"
    assert wrap_lines(Text("✗ loss is nan at step 140"), 17, 2) == ["✗ loss is nan at", "step 140"]
    lines = wrap_lines(Text("word " * 20), 10, 2)
    assert len(lines) == 2 and lines[-1].endswith("…") and all(len(x) <= 10 for x in lines)


def _app(folder):
    source = SnapshotSource(snapshot(folder, NOW + 20))
    return make_app(
        source,
        campaign=load_campaign(folder / "campaign.toml"),
        nvml=Nvml(backend=RecordedNvml(devices=[RTX4090])),
        clock=lambda: NOW + 20,
        auto_tick=False,
        tz=dt.UTC,
        use_user_keymap=False,
    )


async def test_layout_follows_the_terminal_width_and_keeps_the_selection(tmp_path):
    write_scene(tmp_path / "demo")
    app = _app(tmp_path / "demo")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.tick()
        await pilot.pause()
        table = app.main_screen.query_one(RunsTable)
        assert table.layout_name == "compact"
        text = screen_text(app)
        assert "E control-3f9a1c20" in text and "X lr-x1000-c0ffee11" in text
        assert all(len(line) <= 80 for line in text.splitlines())
        assert table.virtual_size.width <= table.size.width  # nothing scrolls sideways
        # the stopped run keeps its whole reason, on two lines at 80 columns
        assert table.cell_text("lr-x1000-c0ffee11", "rules") == "✗ loss is nan at step 140"
        assert table.get_row_height("lr-x1000-c0ffee11") == 2
        await pilot.press("down")
        await pilot.pause()
        assert table.selected_run == "lr-x3-8be01d47"

        await pilot.resize_terminal(120, 30)
        await pilot.pause()
        await app.tick()
        await pilot.pause()
        assert table.layout_name == "full"
        assert table.selected_run == "lr-x3-8be01d47"  # the rebuild kept the cursor
        text = screen_text(app)
        for label in ("category", "elapsed", "plan", "expect", "next ckpt"):
            assert label in text.splitlines()[2], label
        assert "exploratory" in text and "✗ loss is nan at step 140" in text
        assert table.get_row_height("lr-x1000-c0ffee11") == 1

        # a running run's cells update in place: no rebuild, the cursor stays
        snap = snapshot(tmp_path / "demo", NOW + 21)
        snap["runs"][1]["step"] = 1211
        app.source.replace(snap)
        shape = table._shape
        await app.tick()
        await pilot.pause()
        assert table._shape == shape and table.cell_text("lr-x3-8be01d47", "step") == "1,211"
        assert table.selected_run == "lr-x3-8be01d47"


async def test_an_idle_tick_repaints_nothing_and_a_new_step_renders_one_cell(tmp_path, monkeypatch):
    """What an idle console costs each second: with nothing new, no header, banner or panel is
    repainted (a repaint asked a layout pass of the whole screen) and the table renders no cell;
    a running run's new step renders that cell, not every visible cell again."""
    from console.widgets.plots.loss_plot import LossPlot
    from console.widgets.quiet_static import QuietStatic
    from tests.fixtures.console_nvml import NVMLError_LibraryNotFound

    write_scene(tmp_path / "demo")
    app = make_app(
        SnapshotSource(snapshot(tmp_path / "demo", NOW + 20)),
        campaign=load_campaign(tmp_path / "demo" / "campaign.toml"),
        # no NVML: the panel shows the host, sampled every few seconds (the clock stands still here)
        nvml=Nvml(backend=RecordedNvml(fail_init=NVMLError_LibraryNotFound("libnvidia-ml.so.1: not found"))),
        clock=lambda: NOW + 20,
        auto_tick=False,
        tz=dt.UTC,
        use_user_keymap=False,
    )
    app.sampler._monotonic = lambda: 0.0
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(2):
            await app.tick()
            await pilot.pause()
        table = app.main_screen.query_one(RunsTable)
        plot = app.main_screen.query_one(LossPlot)
        repaints: list[str] = []
        monkeypatch.setattr(QuietStatic, "update", lambda self, *a, **k: repaints.append(type(self).__name__))
        monkeypatch.setattr(plot, "refresh", lambda *a, **k: repaints.append("LossPlot"))
        rendered = table.cells_rendered
        await app.tick()
        await pilot.pause()
        assert repaints == [] and table.cells_rendered == rendered

        lines: list[int] = []
        render_line = table._render_line
        monkeypatch.setattr(table, "_render_line", lambda y, *a: lines.append(y) or render_line(y, *a))
        snap = snapshot(tmp_path / "demo", NOW + 20)
        snap["runs"][1]["step"] = 1211
        app.source.replace(snap)
        await app.tick()
        await pilot.pause()
        assert table.cell_text("lr-x3-8be01d47", "step") == "1,211"
        assert table.cells_rendered - rendered == 1 and repaints == []
        # only the changed row's line is painted again (not the header, nor the other rows) ...
        row_y = table.header_height + table.get_row_index("lr-x3-8be01d47")
        assert lines == [row_y]
        # ... and the screen shows the new step on that row, the other rows as they were
        row_line = next(line for line in screen_text(app).splitlines() if "x3-8be01d47" in line)
        assert "1,211" in row_line


def test_the_datatable_internals_the_runs_table_relies_on_are_there():
    """RunsTable keeps rendered cells and repaints one row by overriding DataTable internals (there
    is no public way): a Textual release that renames them fails here, by name, instead of quietly
    repainting the whole table every second again."""
    import inspect

    from textual.widgets import DataTable

    table = DataTable()
    for name in (
        "_data",
        "_update_count",
        "_row_locations",
        "_column_locations",
        "_header_row_key",
        "_show_hover_cursor",
        "_y_offsets",
        "_refresh_region",
        "_render_cell",
        "_clear_caches",
    ):
        assert hasattr(DataTable, name) or hasattr(table, name), f"DataTable.{name} is gone"
    params = list(inspect.signature(DataTable._render_cell).parameters)
    assert params == ["self", "row_index", "column_index", "base_style", "width", "cursor", "hover"]
    assert "self._update_count" in inspect.getsource(DataTable._render_line)  # the cache key it bumps
