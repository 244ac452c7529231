"""One line under the header, shown only when something needs attention: the expiry level past
"ok" (what to do about it), a pilot decision awaited (or just taken), or the runner not answering
(the console keeps reconnecting)."""

from __future__ import annotations

from rich.text import Text

from console.expiry import Expiry
from console.fmt import fmt_span
from console.pilot_view import awaiting, banner_text
from console.retrieval import verified_text
from console.widgets.quiet_static import QuietStatic

MESSAGES = {
    "warning": "WARNING: {to_retrieve} to the retrieval deadline — see what must leave the host (f)",
    "critical": "CRITICAL: retrieval deadline passed: copy files off now (f), {remaining} to expiry",
    "expired": "EXPIRED: the rental window has closed — files left on the host may be gone",
}


class ExpiryBanner(QuietStatic):
    DEFAULT_CSS = """
    ExpiryBanner { height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis; }
    ExpiryBanner.-warning { display: block; background: $warning; color: $text; }
    ExpiryBanner.-critical { display: block; background: $error; color: $text; text-style: bold; }
    ExpiryBanner.-expired { display: block; background: $error-darken-3; color: $text; text-style: bold; }
    ExpiryBanner.-verified { display: block; background: $success-darken-2; color: $text; text-style: none; }
    """

    def show(self, expiry: Expiry, retrieval: dict | None = None, tz=None) -> None:
        """`retrieval`: the snapshot's record of a verified `campaign pull`; the warning then says
        so instead of urging."""
        for level in ("warning", "critical", "expired"):
            self.set_class(expiry.level == level, f"-{level}")
        done = verified_text(retrieval, tz) if expiry.level in ("warning", "critical", "expired") else None
        self.set_class(done is not None, "-verified")
        if done is not None:
            self.put(
                Text(
                    done.replace("retrieved and verified", "RETRIEVED AND VERIFIED", 1),
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
            return
        template = MESSAGES.get(expiry.level)
        if template:
            self.put(
                Text(
                    template.format(
                        to_retrieve=fmt_span(expiry.to_retrieve_seconds), remaining=fmt_span(expiry.remaining_seconds)
                    ),
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )


class ConnectionBanner(QuietStatic):
    DEFAULT_CSS = """
    ConnectionBanner { height: auto; max-height: 2; padding: 0 1; display: none; background: $error-darken-2; }
    ConnectionBanner.-down { display: block; }
    """

    def show(
        self, down_reason: str | None, tries: int, last_seen: float | None, now: float, *, hint: str | None = None
    ) -> None:
        """`hint`: what fixes it (the client's `campaign up` command). At 80 columns the banner's two
        lines would cut it off at the end, so the fix goes first and the details after."""
        self.set_class(down_reason is not None, "-down")
        if down_reason is None:
            return
        ago = f"; last answer {fmt_span(now - last_seen)} ago" if last_seen else ""
        lead = f" — {hint}" if hint else ""
        self.put(
            Text(f"runner not answering, reconnecting (try {tries}){lead}{ago}: {down_reason}", overflow="ellipsis")
        )


class PilotBanner(QuietStatic):
    DEFAULT_CSS = """
    PilotBanner { height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis; }
    PilotBanner.-awaiting { display: block; background: $accent; color: $text; }
    PilotBanner.-decided { display: block; background: $success-darken-2; color: $text; }
    """

    def show(self, pilot: dict | None, now: float, tz=None) -> None:
        text = banner_text(pilot, now, tz)
        self.set_class(text is not None and awaiting(pilot), "-awaiting")
        self.set_class(text is not None and not awaiting(pilot), "-decided")
        if text is not None:
            text.no_wrap, text.overflow = True, "ellipsis"
            self.put(text)


class NotifyBanner(QuietStatic):
    """Shown while a `[notify]` URL fails: a warning that would not reach the user must be seen here."""

    DEFAULT_CSS = """
    NotifyBanner { height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis; }
    NotifyBanner.-failing { display: block; background: $warning-darken-3; color: $text; }
    """

    def show(self, notify: dict | None) -> None:
        failing = (notify or {}).get("failing") or []
        self.set_class(bool(failing), "-failing")
        if failing:
            first = failing[0]
            more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
            self.put(
                Text(
                    f"notifications FAILING to {first.get('url')}{more}: {first.get('error') or 'no answer'} "
                    "— `campaign notify-test` to check",
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )


class WrapUpBanner(QuietStatic):
    """The wrap-up's countdown, then its progress (console/wrapup_view.py)."""

    DEFAULT_CSS = """
    WrapUpBanner { height: 1; padding: 0 1; display: none; text-wrap: nowrap; text-overflow: ellipsis; }
    WrapUpBanner.-shown { display: block; background: $accent-darken-2; color: $text; }
    WrapUpBanner.-active { display: block; background: $warning-darken-1; color: $text; text-style: bold; }
    """

    def show(self, snapshot: dict, now: float) -> None:
        from console.wrapup_view import banner_text, wrap_up_of

        wrap = wrap_up_of(snapshot)
        text = banner_text(wrap, now, (snapshot.get("bundle") or {}).get("retrieve_by"))
        self.set_class(text is not None and (wrap or {}).get("phase") == "scheduled", "-shown")
        self.set_class(text is not None and (wrap or {}).get("phase") != "scheduled", "-active")
        if text is not None:
            self.put(Text(text, no_wrap=True, overflow="ellipsis"))
