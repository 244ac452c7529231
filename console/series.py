"""One run's metric history, kept so that drawing it costs the same at 1,000 or 1,000,000 points.

Points are appended to growable numpy arrays and folded, as they arrive, into a pyramid of
min/max/sum/count blocks (16 points, 256, 4096, ...). Reducing to a plot's width reads the coarsest
level that still has a few entries per pixel column, plus the short unfolded tails of the finer
levels, so its cost is bounded by the plot's width, not by the history's length. Min and max per
column are kept (so a spike is never averaged away); the mean feeds the smoothed line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FACTOR = 16
MAX_LEVELS = 6


class _Grow:
    """A float64 array that doubles its capacity instead of reallocating on each append."""

    __slots__ = ("buf", "n")

    def __init__(self, capacity: int = 1024) -> None:
        self.buf = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.buf):
            cap = max(need, 2 * len(self.buf))
            new = np.empty(cap, dtype=np.float64)
            new[: self.n] = self.buf[: self.n]
            self.buf = new
        self.buf[self.n : need] = values
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.buf[: self.n]


class _Level:
    """Blocks of FACTOR entries of the level below: first and last x, min, max, sum, count."""

    def __init__(self) -> None:
        self.x0, self.x1 = _Grow(64), _Grow(64)
        self.vmin, self.vmax = _Grow(64), _Grow(64)
        self.vsum, self.cnt = _Grow(64), _Grow(64)

    def __len__(self) -> int:
        return self.x0.n

    def arrays(self, start: int = 0) -> tuple[np.ndarray, ...]:
        return (
            self.x0.view[start:],
            self.x1.view[start:],
            self.vmin.view[start:],
            self.vmax.view[start:],
            self.vsum.view[start:],
            self.cnt.view[start:],
        )


@dataclass(frozen=True)
class Reduced:
    """A series reduced to `columns` bins over [x_lo, x_hi]; NaN where a bin holds no point."""

    vmin: np.ndarray
    vmax: np.ndarray
    mean: np.ndarray


class SeriesStore:
    """Append-only (step, value) history of one metric of one run."""

    def __init__(self) -> None:
        self._x = _Grow()
        self._v = _Grow()
        self._levels: list[_Level] = []
        self.nonfinite_steps: list[float] = []  # where the value was NaN or infinite
        self.version = 0  # bumped on every append: plots cache on it
        self._x_lo, self._x_hi = np.inf, -np.inf

    def __len__(self) -> int:
        return self._x.n

    @property
    def steps(self) -> np.ndarray:
        return self._x.view

    @property
    def values(self) -> np.ndarray:
        return self._v.view

    def last(self) -> tuple[float, float] | None:
        if not self._x.n:
            return None
        return float(self._x.view[-1]), float(self._v.view[-1])

    def x_range(self) -> tuple[float, float] | None:
        """Smallest and largest step seen (steps restart after a resume, so not first and last)."""
        if not self._x.n:
            return None
        return self._x_lo, self._x_hi

    def append(self, steps: np.ndarray | list, values: np.ndarray | list) -> None:
        x = np.asarray(steps, dtype=np.float64)
        v = np.asarray(values, dtype=np.float64)
        if not len(x):
            return
        bad = ~np.isfinite(v)
        if bad.any():
            self.nonfinite_steps.extend(x[bad].tolist()[-16:])
            v = np.where(bad, np.nan, v)
        self._x_lo = min(self._x_lo, float(x.min()))
        self._x_hi = max(self._x_hi, float(x.max()))
        self._x.extend(x)
        self._v.extend(v)
        self._fold()
        self.version += 1

    def _fold(self) -> None:
        """Fold newly completed blocks of each level into the level above."""
        below_n = self._x.n
        for depth in range(MAX_LEVELS):
            if below_n < FACTOR:
                return
            if depth == len(self._levels):
                self._levels.append(_Level())
            level = self._levels[depth]
            done, full = len(level), below_n // FACTOR
            if full > done:
                a, b = done * FACTOR, full * FACTOR
                if depth == 0:
                    x, v = self._x.view[a:b], self._v.view[a:b]
                    xs, vs = x.reshape(-1, FACTOR), v.reshape(-1, FACTOR)
                    finite = ~np.isnan(vs)
                    level.x0.extend(xs[:, 0])
                    level.x1.extend(xs[:, -1])
                    level.vmin.extend(np.fmin.reduce(vs, axis=1))
                    level.vmax.extend(np.fmax.reduce(vs, axis=1))
                    level.vsum.extend(np.where(finite, vs, 0.0).sum(axis=1))
                    level.cnt.extend(finite.sum(axis=1).astype(np.float64))
                else:
                    lower = self._levels[depth - 1]
                    x0, x1, mn, mx, sm, ct = (arr[a:b].reshape(-1, FACTOR) for arr in lower.arrays())
                    level.x0.extend(x0[:, 0])
                    level.x1.extend(x1[:, -1])
                    level.vmin.extend(np.fmin.reduce(mn, axis=1))
                    level.vmax.extend(np.fmax.reduce(mx, axis=1))
                    level.vsum.extend(sm.sum(axis=1))
                    level.cnt.extend(ct.sum(axis=1))
            below_n = len(level)

    def _entries(self, want: int) -> tuple[np.ndarray, ...]:
        """Entries (x, min, max, sum, count) covering the whole history, at least `want` of them
        where the history allows, taken from the coarsest level that has that many."""
        depth = len(self._levels)
        while depth > 0 and len(self._levels[depth - 1]) < want:
            depth -= 1
        parts = []
        covered = 0  # raw points covered so far
        if depth > 0:
            for d in range(depth - 1, -1, -1):
                level = self._levels[d]
                start = covered // FACTOR ** (d + 1)
                x0, x1, mn, mx, sm, ct = level.arrays(start)
                parts.append(((x0 + x1) * 0.5, mn, mx, sm, ct))
                covered = len(level) * FACTOR ** (d + 1)
        x = self._x.view[covered:]
        v = self._v.view[covered:]
        finite = ~np.isnan(v)
        parts.append((x, v, v, np.where(finite, v, 0.0), finite.astype(np.float64)))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(5))

    def reduce(self, x_lo: float, x_hi: float, columns: int, *, log: bool = False) -> Reduced:
        """Min, max and mean of the values in each of `columns` equal bins of [x_lo, x_hi]."""
        columns = max(1, int(columns))
        vmin = np.full(columns, np.nan)
        vmax = np.full(columns, np.nan)
        vsum = np.zeros(columns)
        cnt = np.zeros(columns)
        if self._x.n:
            x, mn, mx, sm, ct = self._entries(2 * columns)
            span = (x_hi - x_lo) or 1.0
            col = np.floor((x - x_lo) / span * columns).astype(np.int64)
            col[x == x_hi] = columns - 1
            keep = (col >= 0) & (col < columns) & (ct > 0)
            col, mn, mx, sm, ct = col[keep], mn[keep], mx[keep], sm[keep], ct[keep]
            np.fmin.at(vmin, col, mn)
            np.fmax.at(vmax, col, mx)
            np.add.at(vsum, col, sm)
            np.add.at(cnt, col, ct)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(cnt > 0, vsum / np.where(cnt > 0, cnt, 1), np.nan)
            if log:
                floor = 1e-12
                vmin = np.log10(np.clip(vmin, floor, None))
                vmax = np.log10(np.clip(vmax, floor, None))
                mean = np.log10(np.clip(mean, floor, None))
        return Reduced(vmin, vmax, mean)


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard-style exponential smoothing over the reduced columns, skipping empty ones.
    Runs on at most a plot's width of values, so a Python loop is cheap."""
    if weight <= 0:
        return values
    out = np.full_like(values, np.nan)
    acc = None
    for i, v in enumerate(values.tolist()):
        if v != v:  # NaN: an empty column
            continue
        acc = v if acc is None else weight * acc + (1 - weight) * v
        out[i] = acc
    return out
