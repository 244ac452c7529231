"""Full-state checkpoints that a new process can resume from exactly.

A resume point is more than weights: model, optimizer, scheduler, AMP scaler, progress,
every random-number state and the data position. `Checkpointer` saves all of it in one
`torch.save` file that loads with `torch.load(weights_only=True)` (RNG states are kept as tensors
and plain ints, never NumPy objects), writes it atomically, keeps the last N, writes the sidecar and
announces each checkpoint on the metric stream (docs/INTERNALS.md).

Why the save is split in two: the training loop only waits for the serialisation into a temp file
in the checkpoint folder (the same work a plain `torch.save` does, so the stall stays near it); the
fsync, the sha256, the rename into place, the folder fsync, the sidecar and the pruning run in a
background thread. A checkpoint is visible under its real name only once it is durable, so a
reader never sees a partial file; the next save (and interpreter exit) waits for that thread.

Signals: SIGTERM asks for a save and a clean exit (`should_stop`); SIGUSR1 asks for a save at the
next `maybe_save`.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from campaign_train import metrics
from campaign_train.atomic import fsync_dir
from campaign_train.checkpoint_files import latest_checkpoint, list_checkpoints, read_verify_record, write_json_atomic
from campaign_train.data import ResumableSampler, resumable_loader
from campaign_train.formats import (
    CHECKPOINT_DIR,
    FINAL_NAME,
    FORMAT,
    checkpoint_name,
    sidecar_path,
    verify_record_paths,
)
from campaign_train.rng import rng_state, set_rng_state
from campaign_train.snapshot import _room_for_copy, snapshot

# the names users' scripts import from here (kept when their code moved to sibling modules)
__all__ = [
    "DEFAULT_EVERY_S",
    "MAX_PENDING_VERIFY",
    "SIGTERM_EXIT_CODE",
    "VERIFY_ENV",
    "Checkpointer",
    "Restored",
    "ResumableSampler",
    "latest_checkpoint",
    "list_checkpoints",
    "read_verify_record",
    "resumable_loader",
    "rng_state",
    "set_rng_state",
    "snapshot",
    "verify_record_paths",
    "write_json_atomic",
]

DEFAULT_EVERY_S = 1800.0
# checkpoints kept while they wait for the supervisor's grading (verification lagging saving)
MAX_PENDING_VERIFY = 16
VERIFY_ENV = "CAMPAIGN_VERIFY"  # "supervisor": the runner's supervisor grades every checkpoint saved
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM


# ---------------------------------------------------------------------------------------------
# The checkpointer


@dataclass
class Restored:
    """What `Checkpointer.restore` brought back besides the objects it loaded in place."""

    path: Path
    step: int
    epoch: int | None
    data: Any
    extra: dict[str, Any] = field(default_factory=dict)


class Checkpointer:
    """Saves and restores everything an exact resume needs, for one training loop.

    ```
    ckpt = Checkpointer(model, opt, scheduler=sched, sampler=loader.sampler, keep=3)
    restored = ckpt.restore()            # CAMPAIGN_RESUME_FROM or the latest good checkpoint
    step = restored.step if restored else 0
    while step < total:
        ...one step...
        step += 1
        ckpt.maybe_save(step)            # on schedule, on SIGUSR1, and on SIGTERM
        if ckpt.should_stop:
            ckpt.exit()                  # checkpoint durable, metrics flushed, exit 143
    ckpt.save_final(step)
    ```
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Any = None,
        *,
        scheduler: Any = None,
        scaler: Any = None,
        sampler: ResumableSampler | None = None,
        every_s: float | None = None,
        keep: int = 3,
        directory: str | Path | None = None,
        install_signals: bool = True,
        background: bool = True,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.scaler = scaler
        self.sampler = sampler
        if every_s is None:
            env = os.environ.get("CAMPAIGN_CHECKPOINT_EVERY")
            every_s = float(env) if env else DEFAULT_EVERY_S
        self.every_s = float(every_s)
        self.keep = max(1, int(keep))
        self.background = background  # False: serialise in the loop (no second host copy)
        self.last_stall_seconds: float | None = None
        self.dir = Path(directory) if directory else metrics.run_dir() / CHECKPOINT_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.should_stop = False
        self.save_requested = False
        self.last_save_at = time.monotonic()
        self.last_path: Path | None = None
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None
        metrics.writer()  # opened here, in the main thread, with its hooks
        self._remove_stale_temps()
        if install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
            signal.signal(signal.SIGUSR1, self._on_sigusr1)

    # -- signals --------------------------------------------------------------------------------
    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.should_stop = True
        metrics.mark_sigterm()

    def _on_sigusr1(self, signum: int, frame: Any) -> None:
        self.save_requested = True

    def _remove_stale_temps(self) -> None:
        """Temp files of an attempt killed mid-save are never checkpoints: remove them."""
        for p in self.dir.glob(".*.tmp-*"):
            try:
                p.unlink()
            except OSError:
                pass

    # -- saving ---------------------------------------------------------------------------------
    def holds(self, data_state: Any) -> list[str]:
        parts = ["model"]
        if self.optimizer is not None:
            parts.append("optimizer")
        if self.scheduler is not None:
            parts.append("scheduler")
        if self.scaler is not None:
            parts.append("scaler")
        parts += ["progress", "rng"]
        if data_state is not None:
            parts.append("data")
        return parts

    def seconds_to_next(self) -> float:
        return max(0.0, self.every_s - (time.monotonic() - self.last_save_at))

    def maybe_save(
        self, step: int, *, epoch: int | None = None, data_state: Any = None, extra: dict[str, Any] | None = None
    ) -> Path | None:
        """Saves when the interval has passed, or when SIGUSR1 or SIGTERM asked for it."""
        due = self.save_requested or self.should_stop or self.seconds_to_next() <= 0
        if not due:
            return None
        path = self.save(step, epoch=epoch, data_state=data_state, extra=extra)
        if self.should_stop:
            self.wait()
        return path

    def save(
        self,
        step: int,
        *,
        epoch: int | None = None,
        data_state: Any = None,
        extra: dict[str, Any] | None = None,
        final: bool = False,
    ) -> Path:
        """Writes a checkpoint now; returns its final path (durable once `wait()` returns)."""
        self.wait()
        t0 = time.perf_counter()
        if data_state is None and self.sampler is not None:
            data_state = self.sampler.state_dict()
        holds = self.holds(data_state)
        state: dict[str, Any] = {
            "format": FORMAT,
            "model": self.model.state_dict(),
            "progress": {"step": int(step), "epoch": epoch, "extra": dict(extra or {})},
            "rng": rng_state(),
            "holds": holds,
        }
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        if data_state is not None:
            state["data"] = data_state
        name = FINAL_NAME if final else checkpoint_name(step)
        dst = self.dir / f"{name}.pt"
        tmp = self.dir / f".{name}.pt.tmp-{os.getpid()}"
        mode = "snapshot" if self.background and _room_for_copy(state) else "inline"
        unsaved: dict[str, Any] | None = None  # what the commit thread still has to write
        if mode == "snapshot":
            unsaved = snapshot(state)  # the loop may go on: this copy no longer changes
        else:
            try:
                torch.save(state, tmp)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        stall = time.perf_counter() - t0
        meta = {
            "format": FORMAT,
            "run_id": metrics.run_id(),
            "step": int(step),
            "epoch": epoch,
            "time": time.time(),
            "holds": holds,
            "final": final,
            "stall_seconds": round(stall, 4),
            "save_mode": mode,
        }
        self._pending = threading.Thread(
            target=self._complete, args=(unsaved, tmp, dst, meta, t0), name="checkpoint-commit", daemon=False
        )
        del state
        self._pending.start()
        self.save_requested = False
        self.last_save_at = time.monotonic()
        self.last_path = dst
        self.last_stall_seconds = stall
        if final:
            self.wait()
        return dst

    def _complete(self, state: dict | None, tmp: Path, dst: Path, meta: dict[str, Any], t0: float) -> None:
        """[Serialise the snapshot,] fsync + sha256, rename into place, sidecar, prune, announce.

        Runs off the training thread: torch.save releases the GIL while it writes tensor data.
        """
        try:
            if state is not None:
                torch.save(state, tmp)
                del state
            digest = hashlib.sha256()
            size = 0
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
                while chunk := f.read(8 << 20):
                    digest.update(chunk)
                    size += len(chunk)
            os.replace(tmp, dst)
            fsync_dir(self.dir)
            write_seconds = time.perf_counter() - t0
            meta.update(bytes=size, sha256=digest.hexdigest(), write_seconds=round(write_seconds, 4))
            write_json_atomic(sidecar_path(dst), meta)
            if not meta["final"]:
                self.prune()
            metrics.event(
                "checkpoint",
                step=meta["step"],
                path=str(dst),
                bytes=size,
                write_seconds=meta["write_seconds"],
                holds=meta["holds"],
                final=meta["final"],
            )
        except BaseException as exc:  # reported to the training thread at the next wait()
            self._pending_error = exc
            tmp.unlink(missing_ok=True)
            print(f"campaign_train.checkpoint: saving {dst} failed: {exc!r}", file=sys.stderr)

    def wait(self) -> None:
        """Blocks until the last save is durable; raises if it failed."""
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._pending_error is not None:
            exc, self._pending_error = self._pending_error, None
            raise RuntimeError(f"the last checkpoint could not be written: {exc}") from exc

    def save_final(self, step: int, **kwargs: Any) -> Path:
        """`checkpoints/final.pt` + `final.json` (final=true), written and durable on return."""
        return self.save(step, final=True, **kwargs)

    def prune(self) -> None:
        """Keeps the newest `keep` checkpoints and the newest verified one. Under a runner (whose
        supervisor grades each checkpoint and writes `<name>.verify.json`), it also keeps every
        checkpoint newer than the newest one judged so far, up to MAX_PENDING_VERIFY of them:
        those wait for their grading. So the newest verified resume point is deleted only once a
        newer checkpoint's verify record is on disk, and a checkpoint is never deleted under the
        verifier that is reloading it (which graded it "gone")."""
        items = list_checkpoints(self.dir)
        records = {step: read_verify_record(p) for step, p in items}
        keep = {step for step, _ in items[-self.keep :]}
        verified = [step for step, _ in items if (records[step] or {}).get("verified")]
        if verified:
            keep.add(verified[-1])
        if os.environ.get(VERIFY_ENV) == "supervisor":
            judged = [step for step, _ in items if records[step] is not None]
            newest_judged = judged[-1] if judged else None
            pending = [step for step, _ in items if newest_judged is None or step > newest_judged]
            keep.update(pending[-MAX_PENDING_VERIFY:])
        for step, p in items:
            if step in keep:
                continue
            for q in (p, sidecar_path(p), *verify_record_paths(p)):
                q.unlink(missing_ok=True)

    def exit(self, code: int | None = None) -> None:
        """After SIGTERM: make the last save durable, write the end event, leave (143 by default)."""
        self.wait()
        metrics.end("sigterm" if self.should_stop else "ok")
        sys.exit(SIGTERM_EXIT_CODE if code is None and self.should_stop else (code or 0))

    # -- restoring ------------------------------------------------------------------------------
    def find_resume_point(self) -> Path | None:
        env = os.environ.get("CAMPAIGN_RESUME_FROM")
        if env:
            p = Path(env)
            if not p.is_file():
                raise FileNotFoundError(f"CAMPAIGN_RESUME_FROM names {p}, which does not exist")
            return p
        return latest_checkpoint(self.dir)

    def restore(self, path: str | Path | None = None) -> Restored | None:
        """Loads the resume point into the model, optimizer, ... and the RNGs; None for a fresh start.

        Load errors are raised, never swallowed: a run that cannot resume must not silently
        start again from step 0.
        """
        p = Path(path) if path else self.find_resume_point()
        if p is None:
            metrics.start(None)
            return None
        state = torch.load(p, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"{p} is not a {FORMAT} checkpoint")
        self.model.load_state_dict(state["model"])
        for part, obj in (("optimizer", self.optimizer), ("scheduler", self.scheduler), ("scaler", self.scaler)):
            if obj is None:
                continue
            if part not in state:
                raise ValueError(f"{p} holds no {part} state, but this loop has one")
            obj.load_state_dict(state[part])
        data = state.get("data")
        if self.sampler is not None and data is not None:
            self.sampler.load_state_dict(data)
        set_rng_state(state["rng"])
        progress = state["progress"]
        self.last_path = p
        self.last_save_at = time.monotonic()
        metrics.start(str(p))
        return Restored(
            path=p,
            step=int(progress["step"]),
            epoch=progress.get("epoch"),
            data=data,
            extra=dict(progress.get("extra") or {}),
        )
