"""Loss curves: the selected run against the control on the same axes, or every running run.

The widget owns its metric histories (`MetricTails`, read from each run's `metrics.jsonl`); the
app's tick reads new lines off the UI thread (`read_new`) and hands them back here (`apply`). Each
frame reduces every history to the plot's width first (`SeriesStore.reduce`), so a frame costs
the same at a thousand points or a million. `l` toggles a log scale, `m` cycles smoothing, `v`
switches between the two views.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from console.metrics_tail import MetricTails
from console.plot_canvas import Trace, render_plot
from console.series import ema
from runner.ledger.states import RunState

SMOOTHING = (0.0, 0.6, 0.9)
PALETTE = ("bright_magenta", "green", "yellow", "bright_blue", "red", "bright_cyan", "white", "magenta")
CONTROL_COLOR = "cyan"


class LossPlot(Widget):
    DEFAULT_CSS = """
    LossPlot { height: 1fr; min-height: 6; padding: 0 1 0 0; }
    """

    log_scale: reactive[bool] = reactive(False)
    smoothing_index: reactive[int] = reactive(0)
    show_all: reactive[bool] = reactive(False)

    def __init__(self, *, metric: str = "loss", **kwargs) -> None:
        super().__init__(**kwargs)
        self.metric = metric
        self.tails = MetricTails(metric)
        self.selected: str | None = None
        self.control_run: str | None = None
        self.running: list[str] = []
        self.run_dirs: dict[str, str | None] = {}
        self._running_ids: dict[str, None] = {}  # running run ids, in the order first seen
        self._variants: dict[str, dict[str, str]] = {}  # variant -> run id -> state
        self.control_variant: str | None = None

    # -- data ---------------------------------------------------------------------------------
    def take_runs(self, rows, *, full: bool = False) -> None:
        """Note the runs that changed (all of them when `full`): their folders, who is running,
        and each variant's runs (for the control curve). Costs the rows given."""
        if full:
            self.run_dirs, self._running_ids, self._variants = {}, {}, {}
        for r in rows:
            rid = str(r.get("id") or "")
            if not rid:
                continue
            self.run_dirs[rid] = r.get("run_dir")
            if r.get("state") == RunState.RUNNING:
                self._running_ids.setdefault(rid, None)
            else:
                self._running_ids.pop(rid, None)
            self._variants.setdefault(str(r.get("variant")), {})[rid] = str(r.get("state"))
        self.running = list(self._running_ids)

    def set_runs(self, selected: str | None, control_variant: str | None) -> None:
        self.control_variant = control_variant
        control_runs = self._variants.get(str(control_variant), {}) if control_variant is not None else {}
        best = [rid for rid, state in control_runs.items() if state in (RunState.RUNNING, RunState.FINISHED)] or list(
            control_runs
        )
        control_run = best[-1] if best else None
        if (selected, control_run) != (self.selected, self.control_run):
            self.selected, self.control_run = selected, control_run
            self.refresh()  # a new curve to draw; new points repaint through `apply`

    def wanted(self) -> dict[str, str | None]:
        """The folders of the curves drawn now: the selected run and the control's, or every
        running run in the `v` view."""
        return {rid: self.run_dirs.get(rid) for rid, _ in self.visible_runs()}

    def read_new(self) -> dict:
        """New metric records of the curves drawn (safe to call from a worker thread); a curve
        shown next is read when it is shown (the app's `read_curves_soon`)."""
        return self.tails.read(self.wanted())

    def apply(self, batch: dict) -> None:
        """New points (`read_new`): a repaint when a curve drawn now grew."""
        grew = self.tails.apply(batch)
        if grew and any(rid in grew for rid, _ in self.visible_runs()):
            self.refresh()

    # -- view ---------------------------------------------------------------------------------
    @property
    def smoothing(self) -> float:
        return SMOOTHING[self.smoothing_index % len(SMOOTHING)]

    def visible_runs(self) -> list[tuple[str, str]]:
        """(run id, colour) in draw order: the selected run drawn last, so it is on top."""
        if self.show_all:
            ids = list(self.running)
            if self.selected and self.selected not in ids:
                ids.append(self.selected)
            others = [i for i in ids if i != self.selected]
            out = [(rid, PALETTE[(n + 1) % len(PALETTE)]) for n, rid in enumerate(others)]
            if self.selected:
                out.append((self.selected, PALETTE[0]))
            return out
        out = []
        if self.control_run and self.control_run != self.selected:
            out.append((self.control_run, CONTROL_COLOR))
        if self.selected:
            out.append((self.selected, PALETTE[0] if self.selected != self.control_run else CONTROL_COLOR))
        return out

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        return self.draw(width, height)

    def draw(self, width: int, height: int) -> Text:
        view = "all running" if self.show_all else "selected vs control"
        note = (
            f"[{view}{' · log' if self.log_scale else ''}{f' · smooth {self.smoothing:g}' if self.smoothing else ''}]"
        )
        series = [
            (rid, color, s)
            for rid, color in self.visible_runs()
            if (s := self.tails.series(rid)) is not None and len(s)
        ]
        if not series or width < 20 or height < 4:
            return Text(f"{self.metric}: no points yet {note}", style="dim")
        ranges = [r for _, _, s in series if (r := s.x_range()) is not None]  # a series with points has one
        x_lo, x_hi = min((lo for lo, _ in ranges), default=math.inf), max((hi for _, hi in ranges), default=-math.inf)
        columns = max(1, (width - 8) * 2)
        traces = []
        nonfinite = []
        for rid, color, s in series:
            red = s.reduce(x_lo, x_hi, columns, log=self.log_scale)
            line = ema(red.mean, self.smoothing) if self.smoothing else None
            traces.append(Trace(rid, color, red.vmin, red.vmax, line))
            if s.nonfinite_steps:
                nonfinite.append(f"{rid} non-finite @{s.nonfinite_steps[-1]:,.0f}")
        if nonfinite:
            note += " " + "; ".join(nonfinite)
        return render_plot(traces, width, height, x_lo=x_lo, x_hi=x_hi, log=self.log_scale, note=note)

    def watch_log_scale(self) -> None:
        self.refresh()

    def watch_smoothing_index(self) -> None:
        self.refresh()

    def watch_show_all(self) -> None:
        self.refresh()

    def on_unmount(self) -> None:
        self.tails.close()
