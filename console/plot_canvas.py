"""A small braille plotter drawn straight into Rich Text: no plotting library, no shared state.

Each character cell holds 2x4 dots. A series arrives already reduced to one (min, max, mean) per
dot column (`series.SeriesStore.reduce`), so drawing touches at most `2 * width` columns per
series whatever the run's length. Unsmoothed, a column is drawn as its min-max span (spikes stay
visible); smoothed, as a line through the smoothed means. Where series share a cell, the one drawn
last (the selected run) gives the colour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.text import Text

# dot (x, y) inside a cell -> bit of the braille code point (U+2800 + bits)
_BITS = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]], dtype=np.int64)


@dataclass(frozen=True)
class Trace:
    label: str
    color: str
    vmin: np.ndarray  # one value per dot column, NaN where empty
    vmax: np.ndarray
    line: np.ndarray | None = None  # smoothed values: drawn as a line instead of the span


def fmt_tick(v: float, log: bool) -> str:
    if log:
        v = 10**v
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.1e}"
    return f"{v:.3g}"


def y_bounds(traces: list[Trace]) -> tuple[float, float] | None:
    lows = [np.nanmin(t.vmin) for t in traces if np.isfinite(t.vmin).any()]
    highs = [np.nanmax(t.vmax) for t in traces if np.isfinite(t.vmax).any()]
    if not lows:
        return None
    lo, hi = float(min(lows)), float(max(highs))
    if hi - lo < 1e-12:
        pad = abs(lo) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    return lo, hi


def render_plot(
    traces: list[Trace],
    width: int,
    height: int,
    *,
    x_lo: float,
    x_hi: float,
    log: bool = False,
    note: str = "",
    axis_style: str = "dim",
) -> Text:
    """The whole plot (legend line, plot area with a y axis, x axis line) as `height` lines."""
    gutter = 8
    plot_w = max(1, width - gutter)
    plot_h = max(1, height - 2)
    out = Text(no_wrap=True, overflow="crop")
    legend = Text(no_wrap=True, overflow="ellipsis")
    for t in traces:
        legend.append("━ ", style=t.color)
        legend.append(t.label + "  ")
    if note:
        legend.append(note, style=axis_style)
    legend.truncate(width)
    out.append_text(legend)
    out.append("\n")

    bounds = y_bounds(traces)
    dots_w, dots_h = plot_w * 2, plot_h * 4
    cell_owner = np.full((plot_h, plot_w), -1, dtype=np.int64)
    codes = np.zeros((plot_h, plot_w), dtype=np.int64)
    if bounds is not None:
        lo, hi = bounds
        scale = (dots_h - 1) / (hi - lo)
        for index, t in enumerate(traces):
            pix = np.zeros((dots_h, dots_w), dtype=bool)
            if t.line is not None:
                _draw_line(pix, t.line, lo, scale, dots_h)
            else:
                _draw_spans(pix, t.vmin, t.vmax, lo, scale, dots_h)
            cells = pix.reshape(plot_h, 4, plot_w, 2)
            bits = np.einsum("hywx,yx->hw", cells.astype(np.int64), _BITS)
            codes |= bits
            cell_owner[bits > 0] = index
    for row in range(plot_h):
        label = ""
        if bounds is not None:
            lo, hi = bounds
            if row == 0:
                label = fmt_tick(hi, log)
            elif row == plot_h - 1:
                label = fmt_tick(lo, log)
            elif plot_h >= 5 and row == plot_h // 2:
                label = fmt_tick(hi - (hi - lo) * (row * 4 + 1.5) / (dots_h - 1), log)
        out.append(label.rjust(gutter - 1)[: gutter - 1] + "┤", style=axis_style)
        _append_row(out, codes[row], cell_owner[row], traces)
        out.append("\n")
    left = f"{x_lo:,.0f}"
    right = f"step {x_hi:,.0f}" + (" (log)" if log else "")
    axis = " " * gutter + left + " " * max(1, plot_w - len(left) - len(right)) + right
    out.append(axis[:width], style=axis_style)
    return out


def _append_row(out: Text, codes: np.ndarray, owner: np.ndarray, traces: list[Trace]) -> None:
    chars = [chr(0x2800 + int(c)) if c else " " for c in codes.tolist()]
    owners = owner.tolist()
    start = 0
    for i in range(1, len(chars) + 1):
        if i == len(chars) or owners[i] != owners[start]:
            style = traces[owners[start]].color if owners[start] >= 0 else ""
            out.append("".join(chars[start:i]), style=style)
            start = i


def _to_dot(values: np.ndarray, lo: float, scale: float, dots_h: int) -> np.ndarray:
    """Value -> dot row (0 at the top), NaN kept as -1."""
    with np.errstate(invalid="ignore"):
        y = (dots_h - 1) - np.round((values - lo) * scale)
    y = np.where(np.isfinite(y), np.clip(y, 0, dots_h - 1), -1)
    return y.astype(np.int64)


def _draw_spans(pix: np.ndarray, vmin: np.ndarray, vmax: np.ndarray, lo: float, scale: float, dots_h: int) -> None:
    top = _to_dot(vmax, lo, scale, dots_h)
    bottom = _to_dot(vmin, lo, scale, dots_h)
    prev: tuple[int, int] | None = None
    for col in range(min(len(top), pix.shape[1])):
        a, b = int(top[col]), int(bottom[col])
        if a < 0 or b < 0:
            prev = None
            continue
        span = (a, b)
        if prev is not None:  # reach the column before so a steep curve has no gaps
            if prev[1] < a:
                a = prev[1]
            if prev[0] > b:
                b = prev[0]
        pix[a : b + 1, col] = True
        prev = span


def _draw_line(pix: np.ndarray, line: np.ndarray, lo: float, scale: float, dots_h: int) -> None:
    y = _to_dot(line, lo, scale, dots_h)
    prev: int | None = None
    for col in range(min(len(y), pix.shape[1])):
        cur = int(y[col])
        if cur < 0:
            continue
        a, b = (cur, cur) if prev is None else sorted((prev, cur))
        pix[a : b + 1, col] = True
        prev = cur


def has_data(traces: list[Trace]) -> bool:
    return any(np.isfinite(t.vmax).any() for t in traces)
