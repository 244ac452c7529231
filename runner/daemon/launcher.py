"""The runner's queue and GPU slots: queueing variants, launching supervisors, abort, resume, and
taking live runs back after a restart.

A run is frozen when it is queued: its folder gets `run.toml` (the variant and the rules that apply,
as the campaign file writes them) and its id is the hash of that configuration, so what launches is
exactly what was queued. Launching writes `launch.json` and starts `python -m runner.supervision.supervisor
RUN_DIR` in a session of its own; the supervisor owns the process from then on, and the runner only
records what the run folder says (runner.daemon.watcher). Only declared variants can be queued, and argv
lists go to `subprocess` as lists: nothing is ever run through a shell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from campaign_train.atomic import read_json, write_json_atomic, write_text_atomic
from runner.campaign import runid
from runner.campaign.durations import parse_duration
from runner.campaign.faultpoints import fault_point
from runner.campaign.host_view import not_placed_here
from runner.campaign.objects import Campaign
from runner.campaign.placeholders import expand, expand_all, expand_opt
from runner.closing import pilot
from runner.closing.pilot import LaunchHold
from runner.daemon import containment
from runner.daemon.slots import SlotPlan, initial_queue, order_key
from runner.daemon.status import frozen_config
from runner.daemon.watcher import RunWatch
from runner.import_paths import tool_env
from runner.ledger import queries
from runner.ledger.states import PENDING_STATES, TERMINAL_STATES, RunState
from runner.ledger.store import Ledger, runs_in_state
from runner.supervision import kept_copy, proctree
from runner.supervision.checkpoints import grade_now, step_of, verify_path_for

GRACE_ENV = "CAMPAIGN_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 30.0


class RequestError(Exception):
    """A request the runner refuses; `code` "bad_input" when it was the user's mistake."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Active:
    run_id: str
    attempt: int
    slot_keys: list[str]
    watch: RunWatch
    popen: subprocess.Popen | None = None  # our child; None when re-adopted
    supervisor: Any = None  # psutil.Process, identity checked
    extra: dict = field(default_factory=dict)
    unrecorded: tuple[dict, dict] | None = None  # launched, but the ledger could not be written yet

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        p = self.supervisor
        if p is None:
            return False
        return not proctree.gone(p)


class RunManager:
    def __init__(
        self, campaign: Campaign, ledger: Ledger, slots: SlotPlan, *, grace_seconds: float | None = None
    ) -> None:
        self.campaign = campaign
        self.ledger = ledger
        self.slots = slots
        if grace_seconds is None:
            try:
                grace_seconds = float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_SECONDS))
            except ValueError:
                grace_seconds = DEFAULT_GRACE_SECONDS
        self.grace = grace_seconds
        self.active: dict[str, Active] = {}
        self.wrapup_hold = False  # True from the wrap-up's start on: nothing new launches
        self.busy: dict[str, str] = {}  # slot key -> run id
        self.hold: LaunchHold = pilot.OPEN  # the pilot's hold, as the last launch pass found it
        self.faults = containment.Recorder(ledger.event)
        self.draining: dict[str, tuple[RunWatch, threading.Thread]] = {}  # ended, an orphan being stopped

    # -- helpers -------------------------------------------------------------------------------
    def _variant_table(self, run: dict) -> dict:
        return frozen_config(run["run_dir"]).get("variant", {})

    def free_slots(self) -> list[int]:
        return [i for i, k in enumerate(self.slots.keys) if k not in self.busy]

    def _watch(self, run: dict) -> RunWatch:
        vt = self._variant_table(run)
        return RunWatch(
            self.ledger,
            run,
            root=self.campaign.root,
            metrics_regex=vt.get("metrics_regex"),
            metrics_format=vt.get("metrics_format"),
            checkpoint_glob=expand_opt(vt.get("checkpoint_glob"), run["id"]),
            offset=queries.metrics_offset(self.ledger.conn, run["id"]),
        )

    # -- queueing ------------------------------------------------------------------------------
    def enqueue(self, variant_name: str, *, why: str = "start") -> dict:
        """Queue a declared variant's current configuration as a run (or say why not)."""
        try:
            variant = self.campaign.variant(variant_name)
        except KeyError:
            names = ", ".join(v.name for v in self.campaign.variants)
            raise RequestError(
                f"{self.campaign.path}: variant {variant_name!r} is not declared in the campaign "
                f"file (declared: {names})",
                code="bad_input",
            ) from None
        elsewhere = not_placed_here(self.campaign, variant_name)
        if elsewhere is not None:
            raise RequestError(elsewhere, code="bad_input")
        rid = runid.run_id(self.campaign, variant)
        existing = self.ledger.run(rid)
        if existing is not None:
            state = existing["state"]
            if state in PENDING_STATES:
                return {"run": rid, "state": state, "note": "already " + state + self._window_note()}
            if state == RunState.FINISHED:
                raise RequestError(
                    f"run {rid} of this exact configuration already finished: a re-run of the "
                    "same configuration does not count twice. Change the configuration "
                    "(command, rules, inputs) to get a new run.",
                    code="bad_input",
                )
            if state == RunState.REFUSED:
                return self._requeue(existing, "start")
            raise RequestError(
                f"run {rid} of this configuration is {state}: use `campaign resume {rid}` to "
                "continue it, or change the configuration to get a new run.",
                code="bad_input",
            )
        run_dir = self.campaign.runs_dir / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        frozen: dict[str, Any] = {
            "run": {
                "id": rid,
                "variant": variant.name,
                "category": variant.category,
                "config_hash": rid.rsplit("-", 1)[1],
                "campaign": self.campaign.name,
                "root": str(self.campaign.root),
                "created_at": now,
            },
            "variant": runid.raw_variant(self.campaign, variant.name),
            "rule": runid.raw_rules(self.campaign, variant.name),
            "env": dict(variant.env),
        }
        write_text_atomic(run_dir / "run.toml", tomli_w.dumps(frozen))
        self.ledger.insert_run(
            {
                "id": rid,
                "variant": variant.name,
                "category": variant.category,
                "config_hash": frozen["run"]["config_hash"],
                "state": RunState.QUEUED,
                "run_dir": str(run_dir),
                "planned_hours": variant.hours,
                "queued_at": now,
            }
        )
        self.ledger.event("queued", rid, variant=variant.name, why=why, identity=runid.identity(self.campaign, variant))
        note = self._window_note()
        return {"run": rid, "state": RunState.QUEUED, **({"note": note.lstrip("; ")} if note else {})}

    def _window_note(self) -> str:
        """Said when a run is queued before the rental window opens: it waits, it is not lost."""
        opens = self.campaign.bundle.started_at
        wait = opens.timestamp() - time.time()
        if wait <= 0:
            return ""
        return f"; waiting: the rental window opens at {opens:%Y-%m-%d %H:%M} UTC, in {wait / 3600:.1f} h"

    def _requeue(self, run: dict, why: str) -> dict:
        self.ledger.change_run(
            run["id"],
            "queued",
            dict(
                state=RunState.QUEUED,
                queued_at=time.time(),
                stop_reason=None,
                stop_rule=None,
                stop_value=None,
                stop_step=None,
            ),
            durable=False,
            variant=run["variant"],
            why=why,
        )
        return {"run": run["id"], "state": RunState.QUEUED}

    def queue_initial(self) -> list[str]:
        """At start: phase variants that have never had a run, in launch order."""
        have = {r["variant"] for r in self.ledger.runs()}
        out = []
        for name in initial_queue(self.campaign):
            if name not in have and not_placed_here(self.campaign, name) is None:
                out.append(self.enqueue(name, why="plan")["run"])
        return out

    # -- launching -----------------------------------------------------------------------------
    def launch_hold(self) -> LaunchHold:
        """What the pilot lets launch now; when the wait for a decision ran out, the runner
        records "no decision within ...: continued" and launches again."""
        hold = pilot.launch_hold(self.campaign, self.ledger.conn)
        if hold.wait_ended:
            out = pilot.continue_after_wait(self.campaign, self.ledger.conn)
            self.ledger.announce(
                {"t": out["t"], "run_id": None, "kind": "decision", "choice": "continue", "who": out["who"]}
                | {"how": out["how"], "note": out["note"]}
            )
            hold = pilot.OPEN
        self.hold = hold
        return hold

    def schedule(self) -> bool:
        """Launch queued runs into free slots, in order; refuse those that cannot finish in time.
        Runs the pilot holds (runner.closing.pilot.launch_hold) stay queued; a resume is not held."""
        changed = False
        if self.wrapup_hold:
            return False  # the wrap-up: queued runs wait (not refused), resumable elsewhere
        if time.time() < self.campaign.bundle.started_at.timestamp():
            return False  # the window has not opened: runs wait queued (`start` says so)
        queued = sorted(runs_in_state(self.ledger.conn, RunState.QUEUED), key=order_key(self.campaign))
        waiting = [r for r in queued if r["id"] not in self.active]
        hold = self.launch_hold() if waiting else pilot.OPEN
        for run in queued:
            if run["id"] in self.active or run["id"] in self.draining:
                continue  # resumed while its last attempt is still stopping
            if hold.held and run["variant"] not in hold.allowed and not run.get("attempts"):
                continue  # new work waits for the pilot decision; a resume asked for goes on
            vt = self._variant_table(run)
            need = max(1, int(vt.get("gpus", 1) or 1))
            remaining_h = max(0.0, float(run["planned_hours"]) - (run.get("active_seconds") or 0.0) / 3600.0)
            retrieve_by = self.campaign.bundle.retrieve_by.timestamp()
            now = time.time()
            if now + remaining_h * 3600.0 > retrieve_by:
                left_h = (retrieve_by - now) / 3600.0
                self.refuse(
                    run,
                    f"needs {remaining_h:g} h but only {max(left_h, 0.0):.2f} h remain before the "
                    f"retrieval deadline ({self.campaign.bundle.retrieve_by:%Y-%m-%d %H:%M} UTC, "
                    f"{self.campaign.bundle.retrieval_hours:g} h before expiry)",
                )
                changed = True
                continue
            if need > self.slots.total:
                self.refuse(run, f"needs {need} GPUs but this host has {self.slots.total} slot(s) ({self.slots.note})")
                changed = True
                continue
            free = self.free_slots()
            if len(free) < need:
                break  # strict order: the head waits for its slots
            try:
                self.launch(run, free[:need])
            except Exception as exc:
                if run["id"] in self.active or containment.is_host_failure(exc):
                    # a full disk, a ledger that cannot be written: the host's trouble, not the
                    # run's. It stays queued (or, launched, is recorded at the next tick).
                    self.faults.contained(run["id"], "launching", exc)
                    break
                self._launch_failed(run, exc)
            changed = True
        return changed

    def _launch_failed(self, run: dict, exc: BaseException) -> None:
        """The run's own configuration could not be launched (an env key the OS refuses, a path
        too long): that run fails, with the reason; the queue goes on."""
        reason = f"could not launch: {containment.describe(exc)}"
        containment.log(f"run {run['id']} {reason}")
        self.ledger.change_run(
            run["id"],
            "failed",
            dict(state=RunState.FAILED, stop_reason=reason, ended_at=time.time()),
            attempt=int(run.get("attempts") or 0) + 1,
            reason=reason,
        )

    def refuse(self, run: dict, reason: str) -> None:
        self.ledger.change_run(
            run["id"], "refused", dict(state=RunState.REFUSED, stop_reason=reason, ended_at=time.time()), reason=reason
        )

    def _latest_verified(self, run_id: str) -> str | None:
        """The newest verified checkpoint whose file is still there (a resume point named in the
        ledger but deleted since is skipped, never handed to the script as CAMPAIGN_RESUME_FROM)."""
        paths = queries.newest_checkpoints(self.ledger.conn, run_id, verified=True)
        return next((str(p) for p in paths if p.is_file()), None)

    def _grade_unjudged(self, run: dict) -> None:
        """A checkpoint saved after the last attempt's supervisor stopped judging (a lost
        supervisor's orphan saves on SIGTERM) was never verified: grade the newest one now, so a
        resume starts from it rather than from an older verified one. Blocks for one grading."""
        newest = max(Path(run["run_dir"]).joinpath("checkpoints").glob("ckpt-*.pt"), default=None)
        if newest is None or verify_path_for(newest).exists():
            return
        verified = queries.max_verified_step(self.ledger.conn, run["id"])
        step = step_of(newest)
        if step is None or (verified is not None and step <= verified):
            return
        try:
            command: list[str] | None = list(self.campaign.variant(run["variant"]).command)
        except (KeyError, AttributeError, TypeError):
            command = None
        rec = grade_now(newest, self.campaign.root, command=command)
        self.ledger.upsert_checkpoint(
            run["id"],
            str(newest),
            step=rec["step"],
            t=rec["at"],
            bytes=newest.stat().st_size,
            verified=1 if rec["verified"] else 0,
            grade=rec["grade"],
            holds=rec["holds"],
            problems=rec["problems"],
            verify_seconds=rec["verify_seconds"],
        )
        self.ledger.event(
            "checkpoint_verified",
            run["id"],
            path=str(newest),
            step=rec["step"],
            verified=rec["verified"],
            grade=rec["grade"],
            problems=rec["problems"],
            by="runner, before resuming",
        )

    def launch(self, run: dict, slot_indexes: list[int]) -> None:
        vt = self._variant_table(run)
        attempt = int(run.get("attempts") or 0) + 1
        resume = attempt > 1
        run_dir = Path(run["run_dir"])
        argv = list(vt.get("resume_command") or vt.get("command") or []) if resume else list(vt.get("command") or [])
        argv = expand_all(argv, run["id"])
        keys = [self.slots.keys[i] for i in slot_indexes]
        labels = [self.slots.labels[i] for i in slot_indexes]
        if resume and vt.get("checkpoint_glob"):
            restored = kept_copy.restore_if_needed(run_dir)
            if restored:
                self.ledger.event("checkpoint_restored", run["id"], **restored)
        if resume:
            self._grade_unjudged(run)
        resume_from = self._latest_verified(run["id"]) if resume else None
        env = {str(k): expand(str(v), run["id"]) for k, v in (vt.get("env") or {}).items()}
        env.update(
            {
                "CAMPAIGN_RUN_ID": run["id"],
                "CAMPAIGN_RUN_DIR": str(run_dir),
                "CAMPAIGN_DIR": str(self.campaign.root),
                "CAMPAIGN_ATTEMPT": str(attempt),
                "CUDA_VISIBLE_DEVICES": ",".join(x for x in labels if x),
                "PYTHONUNBUFFERED": "1",
                "CAMPAIGN_VERIFY": "supervisor",  # campaign_train keeps checkpoints awaiting grading
            }
        )
        every = vt.get("checkpoint_every")
        if isinstance(every, str):
            try:
                env["CAMPAIGN_CHECKPOINT_EVERY"] = f"{parse_duration(every):g}"
            except ValueError:
                pass
        if resume_from:
            env["CAMPAIGN_RESUME_FROM"] = resume_from
        write_json_atomic(
            run_dir / "launch.json",
            {"attempt": attempt, "argv": argv, "env": env, "grace_seconds": self.grace, "resume_from": resume_from},
        )
        proc_env = dict(os.environ)
        proc_env.update(env)
        proc_env = tool_env(proc_env)
        watch = self._watch({**run, "attempts": attempt})
        now = time.time()
        with open(os.devnull, "rb") as devnull, open(run_dir / "supervisor.log", "ab") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "runner.supervision.supervisor", str(run_dir)],
                cwd=str(self.campaign.root),
                env=proc_env,
                stdin=devnull,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        ident = proctree.identity_of(popen.pid)
        cols: dict[str, Any] = dict(
            state=RunState.RUNNING,
            attempts=attempt,
            attempt_started_at=now,
            supervisor_pid=popen.pid,
            supervisor_create_time=ident.create_time if ident else None,
            pid=None,
            pid_create_time=None,
            gpu_slot=",".join(keys),
            ended_at=None,
            returncode=None,
            stop_reason=None,
            stop_rule=None,
            stop_value=None,
            stop_step=None,
        )
        if not run.get("launched_at"):
            cols["launched_at"] = now
        event = dict(
            kind="resumed" if resume else "launched",
            attempt=attempt,
            argv=argv,
            gpu_slot=",".join(keys),
            cuda_visible_devices=env["CUDA_VISIBLE_DEVICES"],
            resume_from=resume_from,
            supervisor_pid=popen.pid,
        )
        # watched from the moment it exists: a ledger that cannot be written now (a full disk) must
        # not make the next tick launch the run a second time
        act = Active(
            run["id"],
            attempt,
            keys,
            watch,
            popen=popen,
            supervisor=proctree.process_of(popen.pid, ident.create_time if ident else None),
            unrecorded=(cols, event),
        )
        self.active[run["id"]] = act
        for k in keys:
            self.busy[k] = run["id"]
        self._record_launch(act)

    def _record_launch(self, act: Active) -> None:
        assert act.unrecorded is not None
        cols, event = act.unrecorded
        data = dict(event)
        kind = data.pop("kind")
        self.ledger.change_run(act.run_id, kind, cols, durable=False, **data)
        act.unrecorded = None

    # -- watching ------------------------------------------------------------------------------
    def tick(self) -> bool:
        """Bring each run's ledger rows up to date, end the runs whose supervisor is gone, launch
        what fits. A failure concerning one run is confined to it (runner.daemon.containment)."""
        changed = False
        for act in list(self.active.values()):
            try:
                if act.unrecorded is not None:
                    self._record_launch(act)
                changed |= act.watch.poll()
            except Exception as exc:
                self.faults.contained(act.run_id, "watching", exc)
            try:  # a folder that cannot be read must not keep the run from ending
                if not act.alive():
                    self._finish(act)
                    changed = True
            except Exception as exc:
                self.faults.contained(act.run_id, "ending", exc)
        if self.draining:
            self._drain()
        try:
            changed |= self.schedule()
        except Exception as exc:
            self.faults.contained(None, "scheduling", exc)
        return changed

    def _stop_orphan(self, run_dir: Path, attempt: int) -> threading.Thread | None:
        """A supervisor that died (SIGKILL, OOM) leaves its training process running with no rule
        judging it: stop the run's processes rather than let them hold a GPU unwatched — the
        training process's tree and group, and every process of the supervisor's last `tree.json`
        still alive (setsid'd grandchildren; those of a training process already dead of the broken
        pipe), each identity checked by pid and start time. Returns the thread doing it (None when
        nothing was running)."""
        sup = read_json(run_dir / "supervisor.json")
        if not isinstance(sup, dict) or sup.get("attempt") != attempt:
            return None
        tracked = []
        tree = read_json(run_dir / "tree.json")
        if isinstance(tree, dict) and tree.get("attempt") == attempt and isinstance(tree.get("processes"), list):
            for item in tree["processes"]:
                if isinstance(item, list) and len(item) == 2:
                    p = proctree.process_of(item[0], item[1])
                    if p is not None and not proctree.gone(p):
                        tracked.append(p)
        child = proctree.process_of(sup.get("child_pid"), sup.get("child_create_time"))
        if child is not None and proctree.gone(child):
            child = None
        if child is None and not tracked:
            return None
        target: Callable[..., object]
        args: tuple[Any, ...]
        kwargs: dict[str, Any] = {}
        if child is not None:
            target, args = proctree.stop_tree, (child.pid, sup.get("pgid") or child.pid, self.grace)
            kwargs = {"tracked": tracked}
        else:  # never pass a dead pid as a root: the number may belong to someone else by now
            target, args = proctree.stop_tracked, (tracked, self.grace)
        # the grace period is for the script to save a checkpoint: wait it out off the event loop
        thread = threading.Thread(target=target, args=args, kwargs=kwargs, name=f"stop-orphan-{attempt}", daemon=True)
        thread.start()
        return thread

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
        run = self.ledger.run(act.run_id) or {}
        now = time.time()
        ended = (exit_info or {}).get("ended_at") or now
        if run.get("state") == RunState.ABORTED and state in (RunState.FAILED, RunState.ABORTED):
            state, reason = RunState.ABORTED, run.get("stop_reason")
        elif state == RunState.STOPPED:
            reason = run.get("stop_reason") or reason
        if state == RunState.FAILED and reason and reason.startswith("supervisor lost"):
            tail = [ln for ln in _tail_lines(Path(run.get("run_dir", "")) / "supervisor.log") if ln.strip()]
            if tail:
                reason += f"; supervisor.log ends: {tail[-1].strip()[:200]}"
        orphan = self._stop_orphan(Path(run.get("run_dir", "")), act.attempt) if exit_info is None else None
        if orphan is not None:
            # the supervisor is gone without exit.json (lost, or killed after its verdict)
            reason = (reason or "") + "; its training process was still running unjudged and was stopped"
            if state == RunState.FAILED:
                reason += " (resume it)"
        started = run.get("attempt_started_at") or ended
        cols: dict[str, Any] = dict(
            state=state,
            ended_at=ended,
            exit_attempt=act.attempt,
            returncode=(exit_info or {}).get("returncode"),
            active_seconds=(run.get("active_seconds") or 0.0) + max(0.0, ended - started),
        )
        if state != RunState.FINISHED:
            cols["stop_reason"] = reason
        elif run.get("stop_reason"):
            # an abort that reached the runner after the attempt had ended well: the run finished,
            # and the request stays only in the events (it stopped nothing)
            cols["stop_reason"] = None
            reason = f"ended before the abort took effect ({run['stop_reason']})"
        if run.get("state") == RunState.QUEUED:
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

    # -- after a restart -----------------------------------------------------------------------
    def rebuild(self) -> dict[str, list[str]]:
        """Take back live supervisors (pid and start time checked); close the runs that ended meanwhile."""
        adopted, ended = [], []
        self.repair_missing_ends()
        for run in self.ledger.runs():
            if run["state"] == RunState.QUEUED:
                run = self._maybe_launched_unrecorded(run)
            if run["state"] != RunState.RUNNING:
                continue
            attempt = int(run.get("attempts") or 1)
            sup = read_json(Path(run["run_dir"]) / "supervisor.json")
            pid, ctime = run.get("supervisor_pid"), run.get("supervisor_create_time")
            if isinstance(sup, dict) and sup.get("attempt") == attempt:
                pid, ctime = sup.get("pid", pid), sup.get("create_time", ctime)
            proc = proctree.process_of(pid, ctime)
            watch = self._watch(run)
            keys = [k for k in (run.get("gpu_slot") or "").split(",") if k]
            act = Active(run["id"], attempt, keys, watch, popen=None, supervisor=proc)
            if proc is not None and not proctree.gone(proc):
                self.active[run["id"]] = act
                for k in keys:
                    if k in self.slots.keys:
                        self.busy[k] = run["id"]
                self.ledger.event("adopted", run["id"], supervisor_pid=pid, attempt=attempt)
                act.watch.poll()
                adopted.append(run["id"])
            else:
                state, _, _ = watch.finish()
                self._finish(act)
                self.ledger.event("lost" if state == RunState.FAILED else "ended_while_down", run["id"], state=state)
                ended.append(run["id"])
        return {"adopted": adopted, "ended": ended}

    def repair_missing_ends(self) -> list[str]:
        """A run whose row says it ended but whose history stops at its launch (a ledger written
        before the end and its event were one transaction, killed between the two) gets its end
        event back, marked `repaired`."""
        repaired = []
        kinds = ("launched", "resumed", "queued", *sorted(TERMINAL_STATES))
        for run in self.ledger.runs():
            if run["state"] not in TERMINAL_STATES:
                continue
            if queries.last_event_kind(self.ledger.conn, run["id"], kinds) not in ("launched", "resumed"):
                continue
            self.ledger.event(
                run["state"],
                run["id"],
                durable=True,
                attempt=run.get("exit_attempt") or run.get("attempts"),
                reason=run.get("stop_reason"),
                returncode=run.get("returncode"),
                repaired=True,
            )
            repaired.append(run["id"])
        return repaired

    def _maybe_launched_unrecorded(self, run: dict) -> dict:
        """A runner killed between starting a supervisor and recording it: its supervisor.json says so."""
        attempt = int(run.get("attempts") or 0) + 1
        sup = read_json(Path(run["run_dir"]) / "supervisor.json")
        if not isinstance(sup, dict) or sup.get("attempt") != attempt:
            return run
        launch = read_json(Path(run["run_dir"]) / "launch.json") or {}
        cols: dict[str, Any] = dict(
            state=RunState.RUNNING,
            attempts=attempt,
            supervisor_pid=sup.get("pid"),
            supervisor_create_time=sup.get("create_time"),
            attempt_started_at=sup.get("started_at"),
            launched_at=run.get("launched_at") or sup.get("started_at"),
        )
        cuda = (launch.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        if cuda:
            cols["gpu_slot"] = cuda
        self.ledger.update_run(run["id"], **cols)
        return {**run, **cols}

    # -- requests ------------------------------------------------------------------------------
    def _known(self, run_id: str) -> dict:
        run = self.ledger.run(run_id)
        if run is None:
            raise RequestError(f"no run {run_id!r} in this campaign (see `campaign status`)", code="bad_input")
        return run

    def abort(self, run_id: str, reason: str | None, by: str) -> dict:
        run = self._known(run_id)
        reason = reason or f"aborted by {by}"
        if run["state"] == RunState.QUEUED:
            self.ledger.change_run(
                run_id,
                "aborted",
                dict(state=RunState.ABORTED, stop_reason=reason, ended_at=time.time()),
                reason=reason,
                by=by,
                was=RunState.QUEUED,
            )
            return {"run": run_id, "state": RunState.ABORTED}
        if run["state"] != RunState.RUNNING:
            raise RequestError(
                f"run {run_id} is {run['state']}, not running or queued: nothing to abort", code="bad_input"
            )
        write_json_atomic(Path(run["run_dir"]) / "abort.json", {"reason": reason, "at": time.time(), "by": by})
        self.ledger.change_run(
            run_id,
            "aborted",
            dict(state=RunState.ABORTED, stop_reason=reason),
            reason=reason,
            by=by,
            was=RunState.RUNNING,
        )
        act = self.active.get(run_id)
        if act is not None and act.alive() and act.supervisor is not None:
            try:
                act.supervisor.send_signal(signal.SIGTERM)
            except Exception:
                pass
        return {"run": run_id, "state": RunState.ABORTED}

    def resume(self, run_id: str) -> dict:
        run = self._known(run_id)
        state = run["state"]
        if state in PENDING_STATES:
            return {"run": run_id, "state": state, "note": "already " + state}
        if state == RunState.FINISHED:
            raise RequestError(
                f"run {run_id} finished: there is nothing to resume, and a re-run of the same "
                "configuration does not count twice",
                code="bad_input",
            )
        if not (Path(run["run_dir"]) / "run.toml").exists():
            raise RequestError(
                f"run {run_id} has no run.toml in {run['run_dir']}: it cannot be resumed", code="bad_input"
            )
        self.ledger.event("resume_requested", run_id, was=state, reason=run.get("stop_reason"))
        return self._requeue(run, "resume")

    def signal_checkpoint(self, run_id: str) -> dict:
        self._known(run_id)
        act = self.active.get(run_id)
        if act is None or not act.alive() or act.supervisor is None:
            raise RequestError(f"run {run_id} is not running", code="bad_input")
        act.supervisor.send_signal(signal.SIGUSR1)
        self.ledger.event("checkpoint_requested", run_id)
        return {"run": run_id, "signalled": True}

    def cut_queued(self, run_ids: list[str], note: str) -> None:
        for rid in run_ids:
            run = self.ledger.run(rid)
            if run and run["state"] == RunState.QUEUED:
                self.ledger.change_run(
                    rid,
                    "aborted",
                    dict(state=RunState.ABORTED, cut_by_decision=1, stop_reason=note, ended_at=time.time()),
                    reason=note,
                    by="decision",
                    was=RunState.QUEUED,
                )

    def abort_all(self, reason: str, by: str) -> list[str]:
        out = []
        for run in self.ledger.runs():
            if run["state"] in PENDING_STATES:
                self.abort(run["id"], reason, by)
                out.append(run["id"])
        return out


def _tail_lines(path: Path, max_bytes: int = 4096) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
