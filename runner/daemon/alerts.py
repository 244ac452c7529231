"""What the runner tells the user through `[notify]`: the rental clock's levels (each once, kept
in the ledger across restarts), a run stopped by a rule, a run failed, the pilot decision waiting,
the wrap-up started, the retrieval verified. Messages are queued (runner.daemon.notify) and every
delivery outcome is recorded in the ledger as `notify_sent` / `notify_failed`."""

from __future__ import annotations

import os
import shlex
import socket
import time
from collections.abc import Callable
from typing import Any

from runner.campaign.clock import read_clock
from runner.campaign.durations import duration_words, format_span
from runner.campaign.objects import Campaign
from runner.daemon.notify import Event, Level, Message, Notifier
from runner.ledger import queries
from runner.ledger import store as L
from runner.ledger.pilot_rows import DecidedHow

PILOT_CHECK_S = 5.0
LEVEL_WORDS = {
    "warning": (Level.WARNING, "{left} to the retrieval deadline ({by} UTC): copy the files off the host"),
    "critical": (
        Level.FAILURE,
        "the retrieval deadline has passed; the window closes in {expires}: copy the files off now",
    ),
    "expired": (Level.FAILURE, "the rental window has closed: files left on the host may be gone"),
}


class Alerts:
    def __init__(
        self,
        campaign: Campaign,
        ledger: L.Ledger,
        notifier: Notifier,
        *,
        wrapping_up: Callable[[], bool] = lambda: False,
    ) -> None:
        self.campaign = campaign
        self.ledger = ledger
        self.notifier = notifier
        self.wrapping_up = wrapping_up  # from the wrap-up on, nothing launches: no decision to ask for
        # the name the user reaches this host by, as the console's retrieval screen takes it
        self.host = os.environ.get("CAMPAIGN_SSH_HOST") or socket.gethostname()
        conn = ledger.conn
        self.levels_sent = {
            str(e.get("level")) for e in queries.events_of(conn, ("expiry_notified",))
        }  # each level once, whatever restarts
        self.pilot_sent = L.last_event(conn, "pilot_waiting_notified") is not None
        # a decision is recorded: nothing to ask for, and the pilot's status (it reads every run) is
        # not computed again every few seconds for the rest of the rental
        self.pilot_decided = False
        self._next_pilot_check = 0.0

    def _post(self, event: Event, title: str, body: str, level: Level = Level.INFO) -> bool:
        return self.notifier.post(Message(event, f"[{self.campaign.name}] {title}", f"{body}\n— {self.host}", level))

    # -- ledger events (the runner's listener) --------------------------------------------------
    def on_event(self, ev: dict) -> None:
        kind, run = ev.get("kind"), ev.get("run_id")
        if kind == "verdict":
            self._post(
                Event.RULE_STOP,
                f"{run} stopped by a rule",
                f"{run}: {ev.get('reason') or ev.get('rule')} (step {ev.get('step')})",
                Level.WARNING,
            )
        elif kind in ("failed", "lost"):
            self._post(Event.RUN_FAILED, f"{run} failed", f"{run}: {ev.get('reason') or kind}", Level.FAILURE)
        elif kind == "retrieval_verified":
            self._post(
                Event.RETRIEVAL_VERIFIED,
                "retrieved and verified",
                f"{ev.get('files')} files, {ev.get('bytes')} bytes arrived intact on {ev.get('to')}",
                Level.SUCCESS,
            )
        elif kind == "decision" and ev.get("how"):  # a pilot decision (the wrap-up's has no `how`)
            self._pilot_decided(ev)
        elif kind == "wrap_up_started":
            self._post(
                Event.WRAP_UP,
                "wrap-up started",
                f"nothing new launches; checkpointing and stopping {len(ev.get('runs') or [])} running run(s) "
                f"before the retrieval deadline",
                Level.WARNING,
            )
        elif kind == "wrap_up_done":
            self._post(
                Event.WRAP_UP,
                "wrap-up done: ready to pull",
                f"runs stopped at verified checkpoints; manifest written. {ev.get('note') or ''}".strip(),
                Level.SUCCESS,
            )

    # -- each tick -------------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        for outcome in self.notifier.drain():
            extra: dict[str, Any] = {"error": outcome.error} if outcome.error else {}
            self.ledger.event(
                "notify_sent" if outcome.ok else "notify_failed",
                url=outcome.url,
                event=outcome.message.event.value,
                attempts=outcome.attempts,
                **extra,
            )
        self._expiry(now)
        if now >= self._next_pilot_check:
            self._next_pilot_check = now + PILOT_CHECK_S
            self._pilot()

    def _expiry(self, now: float) -> None:
        clock = read_clock(self.campaign.bundle, now)
        if clock.level not in LEVEL_WORDS or clock.level in self.levels_sent:
            return
        if not self.notifier.wants(Event.EXPIRY):  # not marked sent: `expiry` added later still gets it
            return
        self.levels_sent.add(clock.level)
        self.ledger.event("expiry_notified", level=clock.level)
        level, words = LEVEL_WORDS[clock.level]
        retrieved = queries.current_retrieval(self.ledger.conn)
        body = words.format(
            left=format_span(clock.to_retrieve_seconds),
            by=self.campaign.bundle.retrieve_by.strftime("%a %H:%M"),
            expires=format_span(clock.remaining_seconds),
        )
        if retrieved is not None:
            level = Level.INFO
            body = (
                f"retrieved and verified ({retrieved.get('files')} files to {retrieved.get('to')}); "
                f"the window closes in {format_span(clock.remaining_seconds)}"
            )
        else:
            port = os.environ.get("CAMPAIGN_SSH_PORT", "")
            flag = f"-p {port} " if port.isdigit() and port != "22" else ""
            body += f"; on your machine: campaign pull {flag}{shlex.quote(f'{self.host}:{self.campaign.root}')}"
        self._post(Event.EXPIRY, f"rental {clock.level}", body, level)

    def _pilot_decided(self, ev: dict) -> None:
        """A pilot decision was recorded. One the wait made (`how` wait_ended), before the waiting
        notice went out (a wait shorter than the checks), is said instead: the user learns the runner
        went on without them."""
        self.pilot_decided = True
        if ev.get("how") != DecidedHow.WAIT_ENDED or self.pilot_sent or self.wrapping_up():
            return
        if not self.notifier.wants(Event.PILOT_WAITING):
            return
        self.pilot_sent = True
        self.ledger.event("pilot_waiting_notified")
        self._post(
            Event.PILOT_WAITING,
            "pilot over: continued without a decision",
            f"{ev.get('note') or 'no decision came in time: continued'}; the plan goes on as frozen",
            Level.WARNING,
        )

    def _pilot(self) -> None:
        if self.pilot_sent or self.pilot_decided or not self.notifier.wants(Event.PILOT_WAITING):
            return
        if self.wrapping_up():
            return
        try:
            from runner.closing.pilot import pilot_status

            status: Any = pilot_status(self.campaign, self.ledger.conn)
        except Exception:
            return
        if isinstance(status, dict) and status.get("state") == "decided":
            self.pilot_decided = True
            return
        if isinstance(status, dict) and status.get("state") == "awaiting_decision":
            self.pilot_sent = True
            self.ledger.event("pilot_waiting_notified")
            wait = status.get("wait_seconds")
            then = f"; after {duration_words(wait)} without one the runner continues by itself" if wait else ""
            self._post(
                Event.PILOT_WAITING,
                "pilot decision waiting",
                "the pilot runs are done and launches are held: decide with `campaign decide "
                f"{self.campaign.root} continue | cut VARIANT... | revisit` or the console's D{then}",
                Level.WARNING,
            )
