"""Move or cancel the wrap-up: the runner records who did it and when (`wrap_up` request)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label

from console.screens.form_dialog import FormDialog
from runner.campaign.durations import parse_when


class WrapUpDialog(FormDialog[dict]):
    """Dismisses with {"at": epoch}, {"cancel": True}, or None (kept as it is)."""

    DEFAULT_CSS = """
    WrapUpDialog { align: center middle; }
    WrapUpDialog > Vertical { width: 72; max-width: 100%; height: auto; border: thick $warning;
                              background: $surface; padding: 0 1; }
    WrapUpDialog Label { width: 1fr; }
    WrapUpDialog Horizontal { height: auto; align-horizontal: right; }
    WrapUpDialog Button { margin: 0 0 0 1; min-width: 10; }
    """

    def __init__(self, wrap: dict | None, now: float) -> None:
        super().__init__()
        self.wrap = wrap or {}
        self.now = now

    def compose(self) -> ComposeResult:
        phase = self.wrap.get("phase") or "none"
        at = self.wrap.get("at") or "not set"
        with Vertical():
            yield Label(
                f"Wrap-up: [b]{phase}[/b], at {at} (retrieval deadline {self.wrap.get('retrieve_by') or '?'}). "
                "From then on nothing new launches; running runs checkpoint and stop, keeping their ids."
            )
            movable = phase in ("scheduled", "cancelled")  # once started, it can only be cancelled
            if movable:
                yield Input(placeholder="move to: now, +20m, or 2026-11-29T08:30:00Z", id="at")
            with Horizontal():
                if movable:
                    yield Button("Move", variant="warning", id="confirm")
                if phase != "cancelled":
                    yield Button("Cancel wrap-up", variant="error", id="cancel-wrap-up")
                yield Button("Keep", id="keep")

    def on_mount(self) -> None:
        inputs = self.query("#at")
        (inputs.first() if inputs else self.query_one(Button)).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel-wrap-up":
            event.stop()
            self.dismiss({"cancel": True})
            return
        super().on_button_pressed(event)

    def _confirm(self) -> None:
        text = self.query_one("#at", Input).value.strip()
        if not text:
            self.notify("type when: now, +20m, or a time with its zone", severity="warning")
            return
        try:
            at = parse_when(text, self.now)
        except ValueError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.dismiss({"at": at})
