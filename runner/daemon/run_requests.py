"""The requests a user makes about single runs (abort, resume, checkpoint now) and the decision's
cuts; kept apart from launching so each stays short.
"""

from __future__ import annotations

import signal
import time

from campaign_train.atomic import write_json_atomic
from runner.daemon.manager_state import RequestError
from runner.daemon.queueing import Queueing
from runner.ledger.records import RunRecord
from runner.ledger.states import PENDING_STATES, RunState


class RunRequests(Queueing):
    """The run manager's part that answers requests about runs."""

    def _known(self, run_id: str) -> RunRecord:
        run = self.ledger.run(run_id)
        if run is None:
            raise RequestError(f"no run {run_id!r} in this campaign (see `campaign status`)", code="bad_input")
        return run

    def abort(self, run_id: str, reason: str | None, by: str) -> dict:
        run = self._known(run_id)
        reason = reason or f"aborted by {by}"
        if run.state == RunState.QUEUED:
            self.ledger.change_run(
                run_id,
                "aborted",
                dict(state=RunState.ABORTED, stop_reason=reason, ended_at=time.time()),
                reason=reason,
                by=by,
                was=RunState.QUEUED,
            )
            return {"run": run_id, "state": RunState.ABORTED}
        if run.state != RunState.RUNNING:
            raise RequestError(
                f"run {run_id} is {run.state}, not running or queued: nothing to abort", code="bad_input"
            )
        write_json_atomic(run.run_dir / "abort.json", {"reason": reason, "at": time.time(), "by": by})
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
        state = run.state
        if state in PENDING_STATES:
            return {"run": run_id, "state": state, "note": "already " + state}
        if state == RunState.FINISHED:
            raise RequestError(
                f"run {run_id} finished: there is nothing to resume, and a re-run of the same "
                "configuration does not count twice",
                code="bad_input",
            )
        if not (run.run_dir / "run.toml").exists():
            raise RequestError(f"run {run_id} has no run.toml in {run.run_dir}: it cannot be resumed", code="bad_input")
        self.ledger.event("resume_requested", run_id, was=state, reason=run.stop_reason)
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
            if run is not None and run.state == RunState.QUEUED:
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
            if run.state in PENDING_STATES:
                self.abort(run.id, reason, by)
                out.append(run.id)
        return out
