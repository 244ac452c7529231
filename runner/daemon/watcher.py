"""Following one run's folder into the ledger: metric lines, checkpoints, verdict, supervisor, exit.

The supervisor judges and stops; this side only records what the run folder says, incrementally
and cheaply (a few `stat` calls a second, the metric file read from the offset the ledger keeps, so a
restarted runner goes on where the last one stopped). `derive_end` turns the files of an attempt
into the run's final state exactly as docs/INTERNALS.md says.
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from pathlib import Path
from typing import Any

from campaign_train.atomic import read_json
from runner.ledger.records import RunRecord
from runner.ledger.states import RunState
from runner.ledger.store import Ledger
from runner.supervision.line_parsers import line_parser
from runner.supervision.metric_stream import MetricStream

GLOB_SCAN_SECONDS = 2.0
# the runner reads a running run's metric lines, checkpoint records and verdict once a second, not
# at every quarter-second tick: the supervisor judges the rules, stops the run and grades checkpoints
# itself, the ledger keeps what status and the console show once a second, and each metric read is
# a ledger transaction
READ_EVERY_SECONDS = 1.0


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def derive_end(exit_info: dict | None, verdict: dict | None, attempt: int) -> tuple[RunState, str | None]:
    """(state, reason) for an attempt whose supervisor is gone (INTERNALS.md)."""
    judged = verdict if isinstance(verdict, dict) and verdict.get("attempt", attempt) == attempt else None
    if not isinstance(exit_info, dict) or exit_info.get("attempt", attempt) != attempt:
        if judged is not None:  # its rule had fired: the run is stopped by it, though the supervisor died after
            return RunState.STOPPED, str(judged.get("reason") or f"rule {judged.get('kind')} broken")
        return RunState.FAILED, "supervisor lost: it ended without writing exit.json"
    if judged is not None:
        return RunState.STOPPED, str(judged.get("reason") or f"rule {judged.get('kind')} broken")
    if exit_info.get("killed_by") == "abort":
        return RunState.ABORTED, None
    if exit_info.get("returncode") == 0:
        return RunState.FINISHED, None
    if exit_info.get("error"):
        return RunState.FAILED, str(exit_info["error"])
    if exit_info.get("signal"):
        name = exit_info.get("signal_name") or f"signal {exit_info['signal']}"
        by = exit_info.get("killed_by")
        return RunState.FAILED, f"ended by {name}" + (f" ({by})" if by else "")
    last = exit_info.get("last_output_line")
    return RunState.FAILED, f"exit code {exit_info.get('returncode')}" + (
        f": {last}" if isinstance(last, str) and last else ""
    )


class RunWatch:
    """The ledger's view of one run folder, brought up to date by `poll()`."""

    def __init__(
        self,
        ledger: Ledger,
        run: RunRecord,
        *,
        root: Path,
        metrics_regex: str | None,
        checkpoint_glob: str | None,
        offset: int = 0,
        metrics_format: str | None = None,
        read_every: float = 0.0,
    ) -> None:
        self.ledger = ledger
        self.run_id = run.id
        self.run_dir = run.run_dir
        self.root = root
        self.attempt = int(run.attempts or 1)
        regex = line_parser(metrics_regex, metrics_format)
        # scripts with a metrics_regex (or metrics_format) print to stdout: the supervisor keeps that in output.log
        source = self.run_dir / ("output.log" if regex else "metrics.jsonl")
        self.stream = MetricStream(source, regex=regex, start_offset=offset)
        self._empty_recorded = 0  # the parser's matched_empty already added to the ledger
        self.checkpoint_glob = checkpoint_glob
        self._ckpt_dir_mtime: float | None = None
        self._verify_seen: dict[str, float] = {}
        self._glob_scan_at = 0.0
        self._verdict_seen = False
        self._supervisor_seen = False
        self.read_every = read_every  # seconds between reads of metrics and checkpoints (0: every poll)
        self._read_at = -math.inf

    def close(self) -> None:
        self.stream.close()

    # -- one tick ------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Ingest whatever is new (metric lines, checkpoint records and the verdict at most every
        `read_every` seconds: the supervisor acts on them itself); True when the ledger changed."""
        changed = False
        now = time.monotonic()
        if now - self._read_at >= self.read_every:
            self._read_at = now
            changed = self._metrics()
            changed |= self._checkpoints()
            changed |= self._verdict()
        changed |= self._supervisor()
        return changed

    def _metrics(self, catch_up: bool = False) -> bool:
        """One bounded read a tick (a long file is caught up over several ticks, so the socket
        stays responsive); `catch_up` reads to the end."""
        changed = False
        mark = self.stream.mark()
        parser = self.stream.regex
        batches = self.stream.iter_batches() if catch_up else iter([self.stream.poll()])
        for batch in batches:
            # stdout lines the regex/format matched without a number: counted in the ledger, so
            # status and the console can say the regex follows nothing
            empty = parser.matched_empty - self._empty_recorded if parser is not None else 0
            if not batch and not empty:
                mark = self.stream.mark()
                continue
            try:
                self.ledger.record_metrics(
                    self.run_id,
                    batch,
                    offset=self.stream.offset,
                    bad_lines=self.stream.garbage,
                    restarts=self.stream.restarts,
                    matched_no_numbers=empty,
                )
            except Exception:
                self.stream.rewind(mark)  # not stored (a full disk): read again at the next tick
                if parser is not None:
                    parser.matched_empty = self._empty_recorded
                raise
            self._empty_recorded += empty
            mark = self.stream.mark()
            for rec in [r for r in batch if "event" in r]:
                if rec.get("event") == "checkpoint" and isinstance(rec.get("path"), str):
                    path = self._abs(rec["path"])
                    new = self.ledger.upsert_checkpoint(
                        self.run_id,
                        path,
                        step=rec.get("step"),
                        t=rec.get("t") or time.time(),
                        bytes=rec.get("bytes"),
                        write_seconds=rec.get("write_seconds"),
                        holds=rec.get("holds"),
                    )
                    if new:
                        self.ledger.event(
                            "checkpoint", self.run_id, path=path, step=rec.get("step"), bytes=rec.get("bytes")
                        )
            changed = True
        return changed

    def _abs(self, path: str) -> str:
        p = Path(path)
        return str(p if p.is_absolute() else (self.root / p))

    def _verify_files(self) -> list[Path]:
        out: list[Path] = []
        ck = self.run_dir / "checkpoints"
        m = _mtime(ck)
        if m is not None and m != self._ckpt_dir_mtime:
            self._ckpt_dir_mtime = m
            out.extend(ck.glob("*.verify.json"))
        if self.checkpoint_glob and time.monotonic() - self._glob_scan_at >= GLOB_SCAN_SECONDS:
            self._glob_scan_at = time.monotonic()
            folders = {p.parent for p in self.root.glob(self.checkpoint_glob)}
            for folder in folders:
                if folder != ck:
                    out.extend(folder.glob("*.verify.json"))
        return out

    def _checkpoints(self, force: bool = False) -> bool:
        if force:
            self._ckpt_dir_mtime = None
            self._glob_scan_at = 0.0
        changed = False
        for vf in self._verify_files():
            m = _mtime(vf)
            if m is None or self._verify_seen.get(str(vf)) == m:
                continue
            info = read_json(vf)
            if not isinstance(info, dict) or not isinstance(info.get("path"), str):
                continue
            path = self._abs(info["path"])
            if (
                vf.parent != self.run_dir / "checkpoints"
                and self.checkpoint_glob
                and not fnmatch.fnmatch(os.path.relpath(path, self.root), self.checkpoint_glob)
            ):
                continue
            try:
                size = os.path.getsize(path)
            except OSError:
                size = None
            self.ledger.upsert_checkpoint(
                self.run_id,
                path,
                step=info.get("step"),
                t=info.get("at") or time.time(),
                bytes=size,
                verified=1 if info.get("verified") else 0,
                grade=info.get("grade"),
                holds=info.get("holds"),
                problems=info.get("problems") or [],
                verify_seconds=info.get("verify_seconds"),
            )
            self.ledger.event(
                "checkpoint_verified",
                self.run_id,
                path=path,
                step=info.get("step"),
                verified=bool(info.get("verified")),
                grade=info.get("grade"),
                problems=info.get("problems") or [],
            )
            self._verify_seen[str(vf)] = m  # only once stored: a failed write is tried again
            changed = True
        return changed

    def _verdict(self) -> bool:
        if self._verdict_seen:
            return False
        v = read_json(self.run_dir / "verdict.json")
        if not isinstance(v, dict) or v.get("attempt", self.attempt) != self.attempt:
            return False
        value = v.get("value")
        at = v.get("at")
        self.ledger.change_run(
            self.run_id,
            "verdict",
            dict(
                stop_rule=v.get("kind"),
                stop_value=None if value is None else str(value)[:200],
                stop_step=v.get("step"),
                stop_reason=v.get("reason"),
            ),
            t=at if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) else None,
            rule=v.get("kind"),
            metric=v.get("metric"),
            value=value,
            step=v.get("step"),
            reason=v.get("reason"),
            attempt=self.attempt,
        )
        self._verdict_seen = True
        return True

    def _supervisor(self) -> bool:
        if self._supervisor_seen:
            return False
        info = read_json(self.run_dir / "supervisor.json")
        if not isinstance(info, dict) or info.get("attempt") != self.attempt:
            return False
        self.ledger.update_run(self.run_id, pid=info.get("child_pid"), pid_create_time=info.get("child_create_time"))
        self._supervisor_seen = True
        return True

    # -- the end -------------------------------------------------------------------------------
    def finish(self) -> tuple[str, str | None, dict | None]:
        """Everything left in the folder, then (state, reason, exit info) of this attempt."""
        self._metrics(catch_up=True)
        self._checkpoints(force=True)
        self._verdict()
        self._supervisor()
        exit_info = read_json(self.run_dir / "exit.json")
        verdict = read_json(self.run_dir / "verdict.json")
        state, reason = derive_end(exit_info, verdict, self.attempt)
        return state, reason, exit_info if isinstance(exit_info, dict) else None

    def end_from_files(self) -> tuple[str, str | None, dict | None]:
        """(state, reason, exit info) from exit.json and verdict.json alone."""
        exit_info = read_json(self.run_dir / "exit.json")
        state, reason = derive_end(exit_info, read_json(self.run_dir / "verdict.json"), self.attempt)
        return state, reason, exit_info if isinstance(exit_info, dict) else None

    def supervisor_identity(self) -> dict | None:
        info = read_json(self.run_dir / "supervisor.json")
        return info if isinstance(info, dict) and info.get("attempt") == self.attempt else None


def exit_written(run_dir: Path, attempt: int) -> bool:
    info: Any = read_json(Path(run_dir) / "exit.json")
    return isinstance(info, dict) and info.get("attempt") == attempt
