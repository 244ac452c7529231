"""After a runner restart: live supervisors taken back (pid and start time checked), runs that ended
meanwhile closed, launches and ends the ledger missed repaired.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from campaign_train.atomic import read_json
from runner.daemon.manager_state import Active
from runner.daemon.run_end import RunEnding
from runner.ledger import queries
from runner.ledger.records import RunRecord
from runner.ledger.states import TERMINAL_STATES, RunState
from runner.supervision import proctree


class Recovery(RunEnding):
    """The run manager's part that rebuilds its state from the ledger and the run folders."""

    def rebuild(self) -> dict[str, list[str]]:
        """Take back live supervisors (pid and start time checked); close the runs that ended meanwhile."""
        adopted, ended = [], []
        self.repair_missing_ends()
        for run in self.ledger.runs():
            if run.state == RunState.QUEUED:
                run = self._maybe_launched_unrecorded(run)
            if run.state != RunState.RUNNING:
                continue
            attempt = int(run.attempts or 1)
            sup = read_json(run.run_dir / "supervisor.json")
            pid, ctime = run.supervisor_pid, run.supervisor_create_time
            if isinstance(sup, dict) and sup.get("attempt") == attempt:
                pid, ctime = sup.get("pid", pid), sup.get("create_time", ctime)
            proc = proctree.process_of(pid, ctime)
            watch = self._watch(run)
            keys = [k for k in (run.gpu_slot or "").split(",") if k]
            act = Active(run.id, attempt, keys, watch, popen=None, supervisor=proc)
            if proc is not None and not proctree.gone(proc):
                self.active[run.id] = act
                for k in keys:
                    if k in self.slots.keys:
                        self.busy[k] = run.id
                self.ledger.event("adopted", run.id, supervisor_pid=pid, attempt=attempt)
                act.watch.poll()
                adopted.append(run.id)
            else:
                state, _, _ = watch.finish()
                self._finish(act)
                self.ledger.event("lost" if state == RunState.FAILED else "ended_while_down", run.id, state=state)
                ended.append(run.id)
        swept = self.sweep_cgroups()
        return {"adopted": adopted, "ended": ended, "cgroups_swept": swept}

    def repair_missing_ends(self) -> list[str]:
        """A run whose row says it ended but whose history stops at its launch (a ledger written
        before the end and its event were one transaction, killed between the two) gets its end
        event back, marked `repaired`."""
        repaired = []
        kinds = ("launched", "resumed", "queued", *sorted(TERMINAL_STATES))
        for run in self.ledger.runs():
            if run.state not in TERMINAL_STATES:
                continue
            if queries.last_event_kind(self.ledger.conn, run.id, kinds) not in ("launched", "resumed"):
                continue
            self.ledger.event(
                run.state,
                run.id,
                durable=True,
                attempt=run.exit_attempt or run.attempts,
                reason=run.stop_reason,
                returncode=run.returncode,
                repaired=True,
            )
            repaired.append(run.id)
        return repaired

    def _maybe_launched_unrecorded(self, run: RunRecord) -> RunRecord:
        """A runner killed between starting a supervisor and recording it: its supervisor.json says so."""
        attempt = int(run.attempts or 0) + 1
        sup = read_json(run.run_dir / "supervisor.json")
        if not isinstance(sup, dict) or sup.get("attempt") != attempt:
            return run
        launch = read_json(run.run_dir / "launch.json") or {}
        cols: dict[str, Any] = dict(
            state=RunState.RUNNING,
            attempts=attempt,
            supervisor_pid=sup.get("pid"),
            supervisor_create_time=sup.get("create_time"),
            attempt_started_at=sup.get("started_at"),
            launched_at=run.launched_at or sup.get("started_at"),
        )
        cuda = (launch.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        if cuda:
            cols["gpu_slot"] = cuda
        self.ledger.update_run(run.id, **cols)
        return replace(run, **cols)
