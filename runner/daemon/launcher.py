"""The runner's queue and GPU slots: queueing variants, launching supervisors, abort, resume, and
taking live runs back after a restart.

A run is frozen when it is queued: its folder gets `run.toml` (the variant and the rules that apply,
as the campaign file writes them) and its id is the hash of that configuration, so what launches is
exactly what was queued. Launching writes `launch.json` and starts `python -m runner.supervision.supervisor
RUN_DIR` in a session of its own; the supervisor owns the process from then on, and the runner only
records what the run folder says (runner.daemon.watcher). Only declared variants can be queued, and argv
lists go to `subprocess` as lists: nothing is ever run through a shell.

RunManager is built from parts, one job each: runner.daemon.queueing, .run_end, .recovery and
.run_requests, over the shared state in runner.daemon.manager_state.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from campaign_train.atomic import write_json_atomic
from runner.campaign.durations import parse_duration
from runner.campaign.placeholders import expand, expand_all
from runner.closing import pilot
from runner.closing.pilot import LaunchHold
from runner.daemon import containment
from runner.daemon.manager_state import Active
from runner.daemon.recovery import Recovery
from runner.daemon.run_requests import RunRequests
from runner.daemon.slots import order_key
from runner.import_paths import tool_env
from runner.ledger import queries
from runner.ledger.records import RunRecord
from runner.ledger.states import RunState
from runner.ledger.store import runs_in_state
from runner.supervision import kept_copy, proctree
from runner.supervision.checkpoints import grade_now, step_of, verify_path_for

DECISION_GRACE_S = 30.0  # after a start that finds the pilot's wait ran out while the runner was down


class RunManager(RunRequests, Recovery):
    """The runner's queue and GPU slots: launches queued runs into free slots and watches them."""

    # -- launching -----------------------------------------------------------------------------
    def launch_hold(self) -> LaunchHold:
        """What the pilot lets launch now; when the wait for a decision ran out, the runner
        records "no decision within ...: continued" and launches again."""
        hold = pilot.launch_hold(self.campaign, self.ledger.conn)
        now = time.time()
        if hold.wait_ended and hold.continues_at is not None and hold.continues_at <= self.started_at:
            # the wait ran out while the runner was down: a decision sent as it starts (`campaign
            # decide` starts it) is the one recorded, not a "continued" taken a moment before it
            grace_end = self.started_at + DECISION_GRACE_S
            if now < grace_end:
                hold = LaunchHold(
                    held=True,
                    reason="the wait for the pilot decision ran out while the runner was down: "
                    f"a decision sent now is recorded; the runner continues by itself in {grace_end - now:.0f} s",
                    continues_at=grace_end,
                )
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
        if self.queue_empty:
            return False
        queued = sorted(runs_in_state(self.ledger.conn, RunState.QUEUED), key=order_key(self.campaign))
        self.queue_empty = not queued
        waiting = [r for r in queued if r.id not in self.active]
        hold = self.launch_hold() if waiting else pilot.OPEN
        for run in queued:
            if run.id in self.active or run.id in self.draining:
                continue  # resumed while its last attempt is still stopping
            if hold.held and run.variant not in hold.allowed and not run.attempts:
                continue  # new work waits for the pilot decision; a resume asked for goes on
            vt = self._variant_table(run)
            need = max(1, int(vt.get("gpus", 1) or 1))
            remaining_h = max(0.0, float(run.planned_hours) - (run.active_seconds or 0.0) / 3600.0)
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
                if run.id in self.active or containment.is_host_failure(exc):
                    # a full disk, a ledger that cannot be written: the host's trouble, not the
                    # run's. It stays queued (or, launched, is recorded at the next tick).
                    self.faults.contained(run.id, "launching", exc)
                    break
                self._launch_failed(run, exc)
            changed = True
        return changed

    def _launch_failed(self, run: RunRecord, exc: BaseException) -> None:
        """The run's own configuration could not be launched (an env key the OS refuses, a path
        too long): that run fails, with the reason; the queue goes on."""
        reason = f"could not launch: {containment.describe(exc)}"
        containment.log(f"run {run.id} {reason}")
        self.ledger.change_run(
            run.id,
            "failed",
            dict(state=RunState.FAILED, stop_reason=reason, ended_at=time.time()),
            attempt=int(run.attempts or 0) + 1,
            reason=reason,
        )

    def refuse(self, run: RunRecord, reason: str) -> None:
        self.ledger.change_run(
            run.id, "refused", dict(state=RunState.REFUSED, stop_reason=reason, ended_at=time.time()), reason=reason
        )

    def _latest_verified(self, run_id: str) -> str | None:
        """The newest verified checkpoint whose file is still there (a resume point named in the
        ledger but deleted since is skipped, never handed to the script as CAMPAIGN_RESUME_FROM)."""
        paths = queries.newest_checkpoints(self.ledger.conn, run_id, verified=True)
        return next((str(p) for p in paths if p.is_file()), None)

    def _grade_unjudged(self, run: RunRecord) -> None:
        """A checkpoint saved after the last attempt's supervisor stopped judging (a lost
        supervisor's orphan saves on SIGTERM) was never verified: grade the newest one now, so a
        resume starts from it rather than from an older verified one. Blocks for one grading."""
        newest = max(run.run_dir.joinpath("checkpoints").glob("ckpt-*.pt"), default=None)
        if newest is None or verify_path_for(newest).exists():
            return
        verified = queries.max_verified_step(self.ledger.conn, run.id)
        step = step_of(newest)
        if step is None or (verified is not None and step <= verified):
            return
        try:
            command: list[str] | None = list(self.campaign.variant(run.variant).command)
        except (KeyError, AttributeError, TypeError):
            command = None
        rec = grade_now(newest, self.campaign.root, command=command)
        self.ledger.upsert_checkpoint(
            run.id,
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
            run.id,
            path=str(newest),
            step=rec["step"],
            verified=rec["verified"],
            grade=rec["grade"],
            problems=rec["problems"],
            by="runner, before resuming",
        )

    def launch(self, run: RunRecord, slot_indexes: list[int]) -> None:
        vt = self._variant_table(run)
        attempt = int(run.attempts or 0) + 1
        resume = attempt > 1
        run_dir = run.run_dir
        argv = list(vt.get("resume_command") or vt.get("command") or []) if resume else list(vt.get("command") or [])
        argv = expand_all(argv, run.id)
        keys = [self.slots.keys[i] for i in slot_indexes]
        labels = [self.slots.labels[i] for i in slot_indexes]
        if resume and vt.get("checkpoint_glob"):
            restored = kept_copy.restore_if_needed(run_dir)
            if restored:
                self.ledger.event("checkpoint_restored", run.id, **restored)
        if resume:
            self._grade_unjudged(run)
        resume_from = self._latest_verified(run.id) if resume else None
        env = {str(k): expand(str(v), run.id) for k, v in (vt.get("env") or {}).items()}
        env.update(
            {
                "CAMPAIGN_RUN_ID": run.id,
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
        cgroup = self._run_cgroup(run.id, attempt)
        write_json_atomic(
            run_dir / "launch.json",
            {
                "attempt": attempt,
                "argv": argv,
                "env": env,
                "grace_seconds": self.grace,
                "resume_from": resume_from,
                "cgroup": cgroup,  # the supervisor moves itself in before starting the command
            },
        )
        proc_env = dict(os.environ)
        proc_env.update(env)
        proc_env = tool_env(proc_env)
        watch = self._watch(replace(run, attempts=attempt))
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
        if not run.launched_at:
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
            run.id,
            attempt,
            keys,
            watch,
            popen=popen,
            supervisor=proctree.process_of(popen.pid, ident.create_time if ident else None),
            unrecorded=(cols, event),
        )
        self.active[run.id] = act
        for k in keys:
            self.busy[k] = run.id
        self._record_launch(act)

    def _run_cgroup(self, run_id: str, attempt: int) -> str | None:
        """The attempt's own cgroup, created now; None (tracked by the process list only, said in
        runner.log) when the host has no usable cgroups or this one cannot be made."""
        try:
            path = self.tracking.prepare(run_id, attempt)
        except OSError as exc:
            containment.log(f"{run_id}: {exc}; its processes are tracked by the supervisor's process list only")
            return None
        return str(path) if path is not None else None

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
