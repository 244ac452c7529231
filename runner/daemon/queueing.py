"""Queueing runs: a declared variant's configuration frozen into its run folder (`run.toml`), requeues,
the plan's first queue. Kept apart from launching so each stays short.
"""

from __future__ import annotations

import time
from typing import Any

import tomli_w

from campaign_train.atomic import write_text_atomic
from runner.campaign import runid
from runner.campaign.host_view import not_placed_here
from runner.daemon.manager_state import ManagerBase, RequestError
from runner.daemon.slots import initial_queue
from runner.ledger.records import RunRecord
from runner.ledger.states import PENDING_STATES, RunState


class Queueing(ManagerBase):
    """The run manager's queueing part."""

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
            state = existing.state
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

    def _requeue(self, run: RunRecord, why: str) -> dict:
        self.ledger.change_run(
            run.id,
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
            variant=run.variant,
            why=why,
        )
        return {"run": run.id, "state": RunState.QUEUED}

    def queue_initial(self) -> list[str]:
        """At start: phase variants that have never had a run, in launch order."""
        have = {r.variant for r in self.ledger.runs()}
        out = []
        for name in initial_queue(self.campaign):
            if name not in have and not_placed_here(self.campaign, name) is None:
                out.append(self.enqueue(name, why="plan")["run"])
        return out
