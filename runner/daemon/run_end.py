"""A run's end as the runner records it: the supervisor gone, its exit read, an orphaned training
process stopped and drained. Kept apart from launching so each stays short.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from campaign_train.atomic import read_json
from runner.campaign.faultpoints import fault_point
from runner.daemon import containment
from runner.daemon.manager_state import Active, ManagerBase
from runner.ledger.states import RunState
from runner.supervision import cgroups, proctree


class RunEnding(ManagerBase):
    """The run manager's part that closes runs whose supervisor is gone."""

    def _stop_orphan(self, run_dir: Path, attempt: int, run_id: str) -> threading.Thread | None:
        """A supervisor that died (SIGKILL, OOM) leaves its training process running with no rule
        judging it: stop the run's processes rather than let them hold a GPU unwatched — the
        training process's tree and group, and every process of the supervisor's last `tree.json`
        still alive (setsid'd grandchildren; those of a training process already dead of the broken
        pipe), each identity checked by pid and start time, and each only if its environment says it
        is this attempt's (`CAMPAIGN_RUN_ID`, `CAMPAIGN_ATTEMPT`): supervisor.json and tree.json lie
        in the run folder, which the training script can write, and a process or group named there
        that is not the run's is never signalled. Returns the thread doing it (None when nothing
        was running)."""
        sup = read_json(run_dir / "supervisor.json")
        if not isinstance(sup, dict) or sup.get("attempt") != attempt:
            return None
        # every process the run forked is in its cgroup, whatever it did with sessions. The path is
        # the runner's own, never one read from the run folder (which the training script can
        # write: another cgroup named there must never be emptied)
        cgroup = self.tracking.path_for(run_id, attempt)
        if cgroup is not None and cgroups.members(cgroup):
            return self.stop_cgroup(cgroup, self.grace)
        tracked = []
        tree = read_json(run_dir / "tree.json")
        if isinstance(tree, dict) and tree.get("attempt") == attempt and isinstance(tree.get("processes"), list):
            for item in tree["processes"]:
                if isinstance(item, list) and len(item) == 2:
                    p = proctree.process_of(item[0], item[1])
                    if p is not None and not proctree.gone(p) and _of_attempt(p, run_id, attempt):
                        tracked.append(p)
        child = proctree.process_of(sup.get("child_pid"), sup.get("child_create_time"))
        if child is not None and (proctree.gone(child) or not _of_attempt(child, run_id, attempt)):
            child = None
        if child is None and not tracked:
            return None
        target: Callable[..., object]
        args: tuple[Any, ...]
        kwargs: dict[str, Any] = {}
        if child is not None:
            # the supervisor starts it in a session of its own: its group is its pid, whatever the file says
            target, args = proctree.stop_tree, (child.pid, child.pid, self.grace)
            kwargs = {"tracked": tracked}
        else:  # never pass a dead pid as a root: the number may belong to someone else by now
            target, args = proctree.stop_tracked, (tracked, self.grace)
        # the grace period is for the script to save a checkpoint: wait it out off the event loop
        thread = threading.Thread(target=target, args=args, kwargs=kwargs, name=f"stop-orphan-{attempt}", daemon=True)
        thread.start()
        return thread

    def stop_cgroup(self, path: Path, grace: float) -> threading.Thread:
        """Empty and remove a run's cgroup off the event loop (the grace is the script's to save)."""

        def stop() -> None:
            try:
                res = cgroups.stop_group(path, grace)
                if res.survivors or not res.removed:
                    containment.log(f"the cgroup {path} could not be emptied and removed: {res.survivors} left")
            except Exception as exc:
                containment.log(f"emptying the cgroup {path} failed: {exc!r}")
            finally:
                self.cgroups_stopping.discard(str(path))

        self.cgroups_stopping.add(str(path))
        thread = threading.Thread(target=stop, name=f"stop-cgroup-{path.name}", daemon=True)
        thread.start()
        return thread

    def release_cgroup(self, run_id: str, attempt: int) -> None:
        """A run's attempt is over: what is left in its cgroup (nothing, normally) is killed, and the
        cgroup removed."""
        path = self.tracking.path_for(run_id, attempt)
        if path is None or not path.is_dir() or str(path) in self.cgroups_stopping:
            return
        if cgroups.members(path):
            self.stop_cgroup(path, 0.0)
        elif not cgroups.remove(path, tries=3):
            self.stop_cgroup(path, 0.0)  # the kernel still holds it a moment: a thread retries

    def sweep_cgroups(self) -> list[str]:
        """At start: run cgroups a previous runner left (a crash) that no live run owns are emptied
        and removed; those of re-adopted runs are kept."""
        keep = [p for a in self.active.values() if (p := self.tracking.path_for(a.run_id, a.attempt)) is not None]
        swept = []
        for path in self.tracking.leftovers(keep):
            if str(path) in self.cgroups_stopping:
                continue
            swept.append(f"{path.name} ({len(cgroups.members(path))} processes)")
            self.stop_cgroup(path, self.grace if cgroups.members(path) else 0.0)
        return swept

    def _drain(self) -> None:
        """Metric lines an orphan writes while it is being stopped still count: its watch stays
        open until the tree is gone, then reads to the end once more."""
        for run_id, (watch, thread) in list(self.draining.items()):
            try:
                if thread.is_alive():
                    watch.poll()
                    continue
                watch.finish()
                watch.close()
                del self.draining[run_id]
            except Exception as exc:
                self.faults.contained(run_id, "draining", exc)

    def _finish(self, act: Active) -> None:
        try:
            state, reason, exit_info = act.watch.finish()
        except Exception as exc:
            if containment.is_host_failure(exc):
                raise  # a full disk: the next tick tries again, from the same place
            # the run's own folder is unreadable in part (a metrics file turned into a folder...):
            # what could be read is recorded; the end comes from exit.json and verdict.json
            self.faults.contained(act.run_id, "reading the run's folder at its end", exc)
            state, reason, exit_info = act.watch.end_from_files()
        fault_point("runner:end_ingested")
        run = self.ledger.run(act.run_id)
        # the row as recorded (runs are never deleted; a missing one reads as empty)
        was = run.state if run is not None else None
        was_reason = run.stop_reason if run is not None else None
        run_dir = run.run_dir if run is not None else Path("")
        now = time.time()
        ended = (exit_info or {}).get("ended_at") or now
        if was == RunState.ABORTED and state in (RunState.FAILED, RunState.ABORTED):
            state, reason = RunState.ABORTED, was_reason
        elif state == RunState.STOPPED:
            reason = was_reason or reason
        if state == RunState.FAILED and reason and reason.startswith("supervisor lost"):
            tail = [ln for ln in _tail_lines(run_dir / "supervisor.log") if ln.strip()]
            if tail:
                reason += f"; supervisor.log ends: {tail[-1].strip()[:200]}"
        orphan = self._stop_orphan(run_dir, act.attempt, act.run_id) if exit_info is None else None
        if orphan is None:
            self.release_cgroup(act.run_id, act.attempt)
        if orphan is not None:
            # the supervisor is gone without exit.json (lost, or killed after its verdict)
            reason = (reason or "") + "; its training process was still running unjudged and was stopped"
            if state == RunState.FAILED:
                reason += " (resume it)"
        started = (run.attempt_started_at if run is not None else None) or ended
        cols: dict[str, Any] = dict(
            state=state,
            ended_at=ended,
            exit_attempt=act.attempt,
            returncode=(exit_info or {}).get("returncode"),
            active_seconds=(run.active_seconds if run is not None else 0.0) + max(0.0, ended - started),
        )
        if state != RunState.FINISHED:
            cols["stop_reason"] = reason
        elif was_reason:
            # an abort that reached the runner after the attempt had ended well: the run finished,
            # and the request stays only in the events (it stopped nothing)
            cols["stop_reason"] = None
            reason = f"ended before the abort took effect ({was_reason})"
        if was == RunState.QUEUED:
            # resumed while this attempt was still stopping: it ends, and the run waits for a slot
            cols["state"] = RunState.QUEUED
        # the end and its event in one durable transaction; the watch closes only once both are
        # written (a full disk: the next tick tries again from the same place, nothing lost)
        self.ledger.change_run(
            act.run_id,
            state,
            cols,
            attempt=act.attempt,
            reason=reason,
            returncode=cols["returncode"],
            signal=(exit_info or {}).get("signal"),
            killed_by=(exit_info or {}).get("killed_by"),
        )
        fault_point("runner:end_recorded")
        if orphan is not None:
            self.draining[act.run_id] = (act.watch, orphan)
        else:
            act.watch.close()
        self.active.pop(act.run_id, None)
        for k in act.slot_keys:
            if self.busy.get(k) == act.run_id:
                del self.busy[k]


def _of_attempt(p: Any, run_id: str, attempt: int) -> bool:
    """The process carries this attempt's environment (the supervisor gives it to the training
    process; its children inherit it). One that cleared its environment is not stopped: the gap of
    hosts without cgroups, stated in status."""
    try:
        env = p.environ()
    except Exception:  # gone, a zombie, or not readable
        return False
    return env.get("CAMPAIGN_RUN_ID") == run_id and env.get("CAMPAIGN_ATTEMPT") == str(attempt)


def _tail_lines(path: Path, max_bytes: int = 4096) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
