"""Warnings that reach the user with the console closed: the runner sends them through Apprise.

`[notify] urls` lists Apprise URLs (ntfy, e-mail, Slack, Discord, Telegram, JSON webhooks, ...).
Messages are queued by the runner's loop and sent by one worker thread, so a slow or dead
endpoint never delays a tick. Each URL is tried up to `ATTEMPTS` times with growing pauses
(`BACKOFF_S`); every outcome goes back to the loop (`drain()`), which records it in the ledger
(only the runner's thread writes the ledger) and shows failures in the status snapshot.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from runner.campaign.objects import Notify

ATTEMPTS = 5
BACKOFF_S = (2.0, 10.0, 30.0, 120.0)  # pauses before the 2nd, 3rd, ... attempts
SEND_TIMEOUT_S = 10.0


class Event(StrEnum):
    """The `[notify] events` names."""

    EXPIRY = "expiry"
    RULE_STOP = "rule_stop"
    RUN_FAILED = "run_failed"
    PILOT_WAITING = "pilot_waiting"
    WRAP_UP = "wrap_up"
    RETRIEVAL_VERIFIED = "retrieval_verified"
    TEST = "test"  # `campaign notify-test`: always sent


class Level(StrEnum):
    INFO = "info"
    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"


@dataclass(frozen=True)
class Message:
    event: Event
    title: str
    body: str
    level: Level = Level.INFO


@dataclass(frozen=True)
class Outcome:
    """One URL's result for one message (after its last attempt, or on success)."""

    message: Message
    url: str  # shown form: scheme://host, never the tokens
    ok: bool
    attempts: int
    error: str | None = None
    t: float = field(default_factory=time.time)


def shown_url(url: str) -> str:
    """An Apprise URL without its secrets (tokens and passwords live in the path and user part)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.split("://", 1)[0] + "://…"
    return f"{parts.scheme}://{host}{port}"


def send_once(url: str, message: Message, timeout: float = SEND_TIMEOUT_S) -> str | None:
    """Send `message` to one URL now; None on success, else why not (blocking)."""
    import logging

    import apprise

    ap = apprise.Apprise()
    if not ap.add(url):
        return f"not a URL Apprise understands: {shown_url(url)}"
    with apprise.LogCapture(level=logging.WARNING) as log:
        ok = ap.notify(body=message.body, title=message.title, notify_type=message.level.value, timeout=timeout)
        text = log.getvalue() if hasattr(log, "getvalue") else ""
    if ok:
        return None
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1] if lines else "the service did not accept the message"


class Notifier:
    """The runner's sender: `post()` from the loop, `drain()` from the loop, sending in a thread."""

    def __init__(
        self,
        config: Notify | None,
        *,
        sender: Callable[[str, Message], str | None] = send_once,
        backoff: tuple[float, ...] = BACKOFF_S,
        attempts: int = ATTEMPTS,
    ) -> None:
        self.config = config
        self.sender = sender
        self.backoff = backoff
        self.attempts = attempts
        self._inboxes: dict[str, queue.Queue[Message | None]] = {}  # one sender thread per URL
        self._outbox: queue.Queue[Outcome] = queue.Queue()
        self._seq = itertools.count()
        self.failing: dict[str, Outcome] = {}  # shown URL -> its last failure (cleared by a success)
        self.sent = 0

    def wants(self, event: Event) -> bool:
        config = self.config
        return config is not None and bool(config.urls) and (event is Event.TEST or event.value in config.events)

    def post(self, message: Message) -> bool:
        """Queue a message for every URL (never blocks); False when its event is not wanted."""
        if not self.wants(message.event):
            return False
        for url in self.config.urls if self.config else ():
            inbox = self._inboxes.get(url)
            if inbox is None:  # a dead endpoint holds up its own thread only, never the others
                inbox = self._inboxes[url] = queue.Queue()
                threading.Thread(target=self._work, args=(url, inbox), name="notify", daemon=True).start()
            inbox.put(message)
        return True

    def drain(self) -> list[Outcome]:
        """Outcomes that arrived since the last call (for the loop to record)."""
        out: list[Outcome] = []
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                break
            out.append(item)
            if item.ok:
                self.failing.pop(item.url, None)
                self.sent += 1
            else:
                self.failing[item.url] = item
        return out

    def state(self) -> dict[str, Any]:
        """What the status snapshot shows: the URLs (secrets left out) and the failing ones."""
        urls = [shown_url(u) for u in (self.config.urls if self.config else ())]
        return {
            "urls": urls,
            "events": list(self.config.events) if self.config else [],
            "sent": self.sent,
            "failing": [
                {"url": o.url, "error": o.error, "t": o.t, "event": o.message.event.value, "attempts": o.attempts}
                for o in self.failing.values()
            ],
        }

    def stop(self) -> None:
        for inbox in self._inboxes.values():
            inbox.put(None)

    # -- the worker thread ---------------------------------------------------------------------
    def _work(self, url: str, inbox: queue.Queue[Message | None]) -> None:
        """One URL's sender: new messages first, retries when their pause is over."""
        pending: list[tuple[float, int, Message, int]] = []  # (due, seq, message, attempt)
        while True:
            wait = max(0.0, pending[0][0] - time.monotonic()) if pending else None
            try:
                item = inbox.get(timeout=wait)
            except queue.Empty:  # no new message: a retry is due
                pass
            else:
                if item is None:
                    return
                heapq.heappush(pending, (time.monotonic(), next(self._seq), item, 1))
            while pending and pending[0][0] <= time.monotonic():
                _, _, message, attempt = heapq.heappop(pending)
                try:
                    error = self.sender(url, message)
                except Exception as exc:  # a plugin's bug must not end the sender
                    error = f"{type(exc).__name__}: {exc}"
                if error is None:
                    self._outbox.put(Outcome(message, shown_url(url), True, attempt))
                elif attempt < self.attempts:
                    pause = self.backoff[min(attempt - 1, len(self.backoff) - 1)] if self.backoff else 0.0
                    heapq.heappush(pending, (time.monotonic() + pause, next(self._seq), message, attempt + 1))
                    if attempt == 1:  # shown as failing from the first miss, retried meanwhile
                        self._outbox.put(Outcome(message, shown_url(url), False, attempt, error))
                else:
                    self._outbox.put(Outcome(message, shown_url(url), False, attempt, error))
