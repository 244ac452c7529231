"""Abort confirmation: names the run and asks why (the reason is kept in the ledger for ever)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label

from console.screens.form_dialog import FormDialog


class AbortDialog(FormDialog[str]):
    """Dismisses with the reason (confirmed) or None (cancelled)."""

    DEFAULT_CSS = """
    AbortDialog { align: center middle; }
    AbortDialog > Vertical { width: 64; max-width: 100%; height: auto; border: thick $error;
                             background: $surface; padding: 0 1; }
    AbortDialog Label { width: 1fr; }      /* wrap the question: a long run id clipped it */
    AbortDialog Horizontal { height: auto; align-horizontal: right; }
    AbortDialog Button { margin: 0 0 0 1; min-width: 10; }
    """

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Abort run [b]{self.run_id}[/b]? It keeps its id; the reason is recorded.")
            yield Input(placeholder="reason (required)", id="reason")
            with Horizontal():
                yield Button("Abort run", variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    def _confirm(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self.notify("say why: the reason stays with the run", severity="warning")
            return
        self.dismiss(reason)
