"""Every run of the campaign, one row each, laid out for the terminal's width.

Two layouts (cells in `cells.py`): `compact` below FULL_RULES_MIN columns left for the rules
(an 80-column SSH terminal: category as one letter before the id, hours as used/planned in one
cell) and `full` above (category, elapsed, planned and expected hours, each in its own column).
Column widths are fixed by the layout and the widest id, and the rules column takes what is left,
so nothing scrolls sideways; a reason too long for it wraps onto a second line of its row.

Cells are updated in place by row key while the layout holds (the cursor and scroll stay where
the user left them); a change of layout, width, row height or of the runs listed rebuilds the
rows, keeping the selected run. Stopped, aborted and failed runs stay, with their reason in the
rules column. Which runs are listed, at thousands of runs, is `selection.py`'s business; `show`
takes only the runs that changed, and costs them, not the table.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, Self

from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from console.widgets.runs.cells import row_cells
from console.widgets.runs.selection import RunSelection

GAP = 1  # one space before each column (cell_padding is 0: the table spends no more)
SCROLLBAR = 1  # kept free for the vertical scrollbar, so no row ever scrolls sideways
FULL_RULES_MIN = 24  # the full layout is used when its rules column would get this much
RULES_MIN = 8
ID_MAX = 30
FIRST_ROWS_MIN = 24  # rows added before the first frame: at least a screen's height (see _rebuild)
RENDERED_MAX = 8192  # rendered cells kept (a few per listed cell: with and without the cursor)


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int  # content width; 0: from the widest cell (ids)
    right: bool = False


COMPACT = (
    Column("id", "E/U/X run", 0),
    Column("state", "state", 8),
    Column("step", "step", 5, True),
    Column("loss", "loss", 6, True),
    Column("hours", "run/plan", 8, True),
    Column("ckpt", "ckpt", 9),
    Column("rules", "rules", 0),
)
FULL = (
    Column("id", "run", 0),
    Column("cat", "category", 11),
    Column("state", "state", 8),
    Column("step", "step", 9, True),
    Column("loss", "loss", 8, True),
    Column("elapsed", "elapsed", 8, True),
    Column("planned", "plan", 5, True),
    Column("expected", "expect", 6, True),
    Column("ckpt", "next ckpt", 10),
    Column("rules", "rules", 0),
)
LAYOUTS = {"compact": COMPACT, "full": FULL}


def fit(text: Text, width: int, right: bool = False) -> Text:
    """`text` cropped (with an ellipsis) or padded to `width`, after the column gap."""
    t = text
    if t.cell_len > width:
        t = text.copy()  # `text` is a cached cell: never changed in place
        t.truncate(width, overflow="ellipsis")
    pad = width - t.cell_len
    out = Text(" " * (GAP + pad) if right else " " * GAP)
    out.append_text(t)
    if not right:
        out.append(" " * pad)
    return out


def wrap_lines(text: Text, width: int, max_lines: int) -> list[str]:
    """The words of `text` on at most `max_lines` lines of `width` (the last one ellipsized)."""
    lines = textwrap.wrap(text.plain, width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(lines) > max_lines:
        rest = " ".join(lines[max_lines - 1 :])
        lines = lines[: max_lines - 1] + [rest[: width - 1] + "…"]
    return lines


@dataclass(frozen=True)
class Shape:
    """What the rows were built for: a change of any part rebuilds them."""

    layout: str
    widths: tuple[int, ...]
    heights: tuple[tuple[str, int], ...]  # the runs listed, in order, and their row heights


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable { height: auto; max-height: 45%; min-height: 3; scrollbar-size-vertical: 1; }
    """

    def __init__(self, *args, **kwargs) -> None:
        # rendered cells, kept while the cell holds the same value (see _render_cell); set first:
        # DataTable's constructor already clears caches
        self._rendered: dict[tuple, tuple[object, object]] = {}
        self.cells_rendered = 0  # cells rendered by DataTable (tests count them)
        super().__init__(*args, cell_padding=0, **kwargs)
        self.selection = RunSelection()
        self._shape: Shape | None = None
        self._heights: dict[str, int] = {}  # the listed runs' row heights, as in _shape
        self._listed: list[str] = []
        self._listed_version = -1
        self._cells: dict[str, tuple[dict[str, Text], int]] = {}  # listed run -> cells, height
        self._cells_for: tuple = ()  # the (layout, rules width) the cached cells were made for
        self._generation = 0  # bumped by each _rebuild (rows held back from an older one are dropped)
        self.cells_made = 0  # rows whose cells were computed (tests count them)
        self._row_y: dict[RowKey, int] | None = None  # each row's first line (None: rows changed since)

    @property
    def _runs(self) -> dict[str, dict]:
        return self.selection.rows

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False

    # -- layout ---------------------------------------------------------------------------------
    @property
    def available_width(self) -> int:
        width = self.size.width or (self.app.size.width if self.app else 80)
        return max(width - SCROLLBAR, 20)

    def _widths(self, columns: tuple[Column, ...], id_width: int) -> tuple[int, ...]:
        fixed = [id_width if c.key == "id" else c.width for c in columns if c.key != "rules"]
        used = sum(w + GAP for w in fixed)
        return (*fixed, max(self.available_width - used - GAP, RULES_MIN))

    def plan_layout(self) -> tuple[str, tuple[Column, ...], tuple[int, ...]]:
        """The layout for the current width and runs: (name, columns, content widths)."""
        longest = min(self.selection.longest_id or 16, ID_MAX)
        full = self._widths(FULL, max(longest, len("run")))
        if full[-1] >= FULL_RULES_MIN:
            return "full", FULL, full
        return "compact", COMPACT, self._widths(COMPACT, max(longest + 2, len("E/U/X run")))

    @property
    def layout_name(self) -> str:
        return self._shape.layout if self._shape else self.plan_layout()[0]

    # -- data in --------------------------------------------------------------------------------
    def show(self, runs: list[dict] | None = None, *, full: bool = False) -> None:
        """Take the runs that changed (`full`: these are all of them; runs no longer reported keep
        their rows) and redraw what changed. Costs the runs given, plus the listed rows only when
        the layout or the set of listed runs changed."""
        changed: list[str] | None = None  # None: any listed row may have changed
        if full:
            self.selection.put_all(runs or [])
            self._cells.clear()
        else:
            changed = [str(run.get("id")) for run in runs or []]
            for rid, run in zip(changed, runs or []):
                self.selection.put(run)
                self._cells.pop(rid, None)
        name, columns, widths = self.plan_layout()
        if self._cells_for != (name, widths[-1]):
            self._cells, self._cells_for = {}, (name, widths[-1])
        relisted = self._listed_version != self.selection.version
        if relisted:
            self._listed, self._listed_version = self.selection.visible(), self.selection.version
            self._note()
        if self._shape is None or (self._shape.layout, self._shape.widths) != (name, widths) or not self._cells:
            heights = tuple((rid, self._row(rid)[1]) for rid in self._listed)
        else:
            heights = self._shape.heights
            # the rows listed, or a changed row's height: both are rare, and only then is every
            # listed row looked at (a tick of new steps costs the changed runs only)
            if (relisted and [rid for rid, _ in heights] != self._listed) or any(
                rid in self._heights and self._row(rid)[1] != self._heights[rid] for rid in changed or ()
            ):
                heights = tuple((rid, self._row(rid)[1]) for rid in self._listed)
        shape = Shape(name, widths, heights)
        if shape != self._shape:
            self._rebuild(shape, columns)
            return
        listed = self._heights  # as built for this shape
        for rid in self._listed if changed is None else changed:
            if rid not in listed or rid not in self.rows:  # not listed, or not added yet (_rebuild)
                continue
            cells, height = self._row(rid)
            for col, width in zip(columns, widths):
                value = self._cell_text(cells[col.key], col, width, height)
                if self.get_cell(rid, col.key) != value:
                    self.update_cell(rid, col.key, value)

    def _row(self, rid: str) -> tuple[dict[str, Text], int]:
        """A listed run's cells and row height, computed once per change of the run or layout."""
        hit = self._cells.get(rid)
        if hit is None:
            name, rules_w = self._cells_for
            cells = row_cells(self.selection.rows[rid], name == "compact")
            hit = self._cells[rid] = (cells, min(len(wrap_lines(cells["rules"], rules_w, 2)), 2))
            self.cells_made += 1
        return hit

    def update_cell(
        self, row_key: RowKey | str, column_key: ColumnKey | str, value: Any, *, update_width: bool = False
    ) -> None:
        """DataTable's update_cell repaints the whole table (header, border and every row on screen)
        for one changed cell; here only the lines of the changed row are repainted. The table-wide
        update count is still bumped, so none of DataTable's own caches can serve the old value."""
        if update_width:
            super().update_cell(row_key, column_key, value, update_width=True)
            return
        row_key = RowKey(row_key) if isinstance(row_key, str) else row_key
        column_key = ColumnKey(column_key) if isinstance(column_key, str) else column_key
        if row_key not in self._row_locations or column_key not in self._column_locations:
            super().update_cell(row_key, column_key, value)  # raises CellDoesNotExist, as documented
            return
        self._data[row_key][column_key] = value
        self._update_count += 1
        if self._row_y is None:
            self._row_y = {}
            for y, (key, line) in enumerate(self._y_offsets):
                if line == 0:
                    self._row_y[key] = y
        first = self._row_y.get(row_key)
        if first is None:
            self.refresh()
            return
        top = first + (self.header_height if self.show_header else 0)
        self._refresh_region(Region(0, top, max(self.size.width, self.virtual_size.width), self.rows[row_key].height))

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None) -> RowKey:
        self._row_y = None
        return super().add_row(*cells, height=height, key=key, label=label)

    def clear(self, columns: bool = False) -> Self:
        self._row_y = None
        return super().clear(columns)

    def set_filter(self, text: str) -> None:
        self.selection.set_filter(text)
        self.show()

    def _note(self) -> None:
        """The line under the table (RunsNote) says what is not listed."""
        note = self.selection.note(len(self._listed))
        try:
            from console.widgets.runs.runs_note import RunsNote

            self.screen.query_one(RunsNote).say(note)
        except Exception:  # no note line on this screen (a bare table in a test)
            pass

    def _cell_text(self, text: Text, col: Column, width: int, height: int) -> Text:
        if col.key != "rules" or height == 1:
            return fit(text, width, col.right)
        lines = wrap_lines(text, width, height)
        out = Text()
        for i, line in enumerate(lines):
            if i:
                out.append("\n")
            out.append(" " * GAP + line.ljust(width), style=text.style)
        return out

    def _rebuild(self, shape: Shape, columns: tuple[Column, ...]) -> None:
        """Lay the listed rows out again. The rows a screen can show are added now; the rest
        (up to SHOW_MAX, each measured by DataTable) right after that frame is drawn, so the
        first frame does not wait for rows below the fold."""
        selected, scroll_y = self.selected_run, self.scroll_y
        self.clear(columns=True)
        for col, width in zip(columns, shape.widths):
            self.add_column(fit(Text(col.label, style="bold"), width, col.right), width=width + GAP, key=col.key)
        self._shape, self._heights = shape, dict(shape.heights)
        self._generation += 1
        ids = [rid for rid, _ in shape.heights]
        first = max(self.app.size.height, FIRST_ROWS_MIN) if self.app else len(ids)
        self._add_rows(ids[:first], columns, shape.widths)
        placed = self._restore(selected, scroll_y)
        if len(ids) > first:
            later = None if placed else selected  # the selected run is among the rows held back
            self.call_after_refresh(self._add_rest, self._generation, ids[first:], columns, later, scroll_y)

    def _add_rows(self, ids: list[str], columns: tuple[Column, ...], widths: tuple[int, ...]) -> None:
        for rid in ids:
            cells, height = self._row(rid)
            self.add_row(
                *(self._cell_text(cells[c.key], c, w, height) for c, w in zip(columns, widths)),
                key=rid,
                height=height,
            )

    def _add_rest(self, generation: int, ids: list[str], columns: tuple, selected: str | None, scroll_y: float) -> None:
        """The rows held back by `_rebuild`, unless the table was laid out again since."""
        if generation != self._generation or self._shape is None:
            return
        self._add_rows(ids, columns, self._shape.widths)
        self._restore(selected, scroll_y)

    def _restore(self, selected: str | None, scroll_y: float) -> bool:
        """The cursor back on the run that was selected, and the scroll where it was."""
        if selected is None or selected not in self.rows:
            return False
        self.move_cursor(row=self.get_row_index(selected), animate=False, scroll=False)
        self.scroll_to(y=scroll_y, animate=False)
        return True

    # -- drawing --------------------------------------------------------------------------------
    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> Any:
        """DataTable renders every visible cell again after any `update_cell` (its cache is keyed
        by a table-wide update count), so one changed step made the whole table render again each
        second. Here a rendered cell is kept while the cell holds the very same value (cells are
        replaced, never changed in place), so a tick renders only the cells that changed."""
        if column_index < 0:  # row labels (none here): DataTable's own cache
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        column_key = self._column_locations.get_key(column_index)
        row_key: RowKey | None
        if row_index < 0:  # the header: kept while its column holds the same label
            row_key = self._header_row_key
            column = self.columns.get(column_key) if column_key else None
            value: object = column.label if column is not None else None
        else:
            row_key = self._row_locations.get_key(row_index)
            value = self._data.get(row_key, {}).get(column_key) if row_key and column_key else None
        key = (
            *(row_key, column_key, row_index, base_style, width, cursor, hover),
            *(self._show_hover_cursor, self._pseudo_class_state, self.show_cursor),
        )
        hit = self._rendered.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if len(self._rendered) >= RENDERED_MAX:
            self._rendered.clear()
        self._rendered[key] = (value, lines)
        self.cells_rendered += 1
        return lines

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._rendered.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rendered.clear()

    def on_resize(self, event: events.Resize) -> None:
        if self.selection.rows:
            self.show()

    @property
    def selected_run(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value if key is not None else None

    def cell_text(self, run_id: str, column: str) -> str:
        """The plain words of one cell (tests and the detail screen read them)."""
        return " ".join(str(self.get_cell(run_id, column)).split())
