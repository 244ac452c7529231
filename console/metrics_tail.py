"""Follows each run's `metrics.jsonl` from where it last stopped reading (byte offset).

An unmodified script with a `metrics_regex` writes no metrics file: its curve comes from the
lines of its `output.log` that the regex matches, as the runner reads them.

The console reads the files itself, read-only, through `runner.supervision.metric_stream.MetricStream` (partial
last lines wait, bad lines are skipped and counted, a replaced file is read from its start), so
curves cost the runner nothing. Reading is capped per call so a run with a huge history fills in
over a few ticks instead of freezing one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np

from console.series import SeriesStore
from runner.supervision.line_parsers import line_parser
from runner.supervision.metric_stream import MetricStream

READ_CAP_BYTES = 32 * 1024 * 1024


def frozen_metrics_regex(run_dir: Path) -> str | None:
    """The `metrics_regex` frozen into the run at launch (run.toml), if it has one."""
    return frozen_line_settings(run_dir)[0]


def frozen_line_settings(run_dir: Path) -> tuple[str | None, str | None]:
    """(`metrics_regex`, `metrics_format`) frozen into the run at launch (run.toml)."""
    try:
        with open(run_dir / "run.toml", "rb") as f:
            variant = tomllib.load(f).get("variant", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None, None
    regex, fmt = variant.get("metrics_regex"), variant.get("metrics_format")
    return (regex if isinstance(regex, str) and regex else None, fmt if isinstance(fmt, str) and fmt else None)


class MetricTail:
    """The `metric` history (default "loss") of one run folder, appended into a SeriesStore."""

    def __init__(self, run_dir: str | Path, metric: str = "loss") -> None:
        parser = line_parser(*frozen_line_settings(Path(run_dir)))
        self.path = Path(run_dir) / ("output.log" if parser else "metrics.jsonl")
        self.metric = metric
        self.series = SeriesStore()
        self._stream = MetricStream(self.path, regex=parser)
        self._restarts = 0

    @property
    def skipped(self) -> int:
        return self._stream.garbage

    def poll(self, cap: int = READ_CAP_BYTES) -> int:
        """Read what was appended since the last call; returns the number of points added."""
        return self.apply(self.read(cap))

    def read(self, cap: int = READ_CAP_BYTES) -> tuple[int, np.ndarray, np.ndarray]:
        """Decode new lines (the slow part, fine off the UI thread): (restarts, steps, values)."""
        records = self._stream.poll(cap)
        metric = self.metric
        steps: list[float] = []
        values: list[float] = []
        for rec in records:
            if "event" in rec:
                continue
            v = rec.get(metric)
            s = rec.get("step")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(s, (int, float)):
                steps.append(float(s))
                values.append(float(v))
        return self._stream.restarts, np.array(steps), np.array(values)

    def apply(self, batch: tuple[int, np.ndarray, np.ndarray]) -> int:
        """Append what `read` returned (cheap: do it on the thread that draws)."""
        restarts, steps, values = batch
        if restarts != self._restarts:  # the file was replaced: start over
            self._restarts = restarts
            self.series = SeriesStore()
        if len(steps):
            self.series.append(steps, values)
        return len(steps)

    def close(self) -> None:
        self._stream.close()


class MetricTails:
    """One MetricTail per run id; runs whose folder is unknown are skipped."""

    def __init__(self, metric: str = "loss") -> None:
        self.metric = metric
        self.tails: dict[str, MetricTail] = {}

    def _tail(self, run_id: str, run_dir: str) -> MetricTail:
        tail = self.tails.get(run_id)
        if tail is None or tail.path.parent != Path(run_dir):
            if tail is not None:
                tail.close()
            tail = self.tails[run_id] = MetricTail(run_dir, self.metric)
        return tail

    def read(self, run_dirs: dict[str, str | None]) -> dict[str, tuple]:
        """New points of every run with a known folder (decoding only; see `apply`)."""
        out = {}
        for run_id, run_dir in run_dirs.items():
            if run_dir:
                out[run_id] = self._tail(run_id, run_dir).read()
        return out

    def apply(self, batch: dict[str, tuple]) -> set[str]:
        """Append a `read` batch; the run ids whose history grew."""
        grew = set()
        for run_id, item in batch.items():
            tail = self.tails.get(run_id)
            if tail is not None and tail.apply(item) > 0:
                grew.add(run_id)
        return grew

    def poll(self, run_dirs: dict[str, str | None]) -> bool:
        return bool(self.apply(self.read(run_dirs)))

    def series(self, run_id: str) -> SeriesStore | None:
        tail = self.tails.get(run_id)
        return tail.series if tail is not None else None

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()
        self.tails.clear()
