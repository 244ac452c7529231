"""The runs table's filter: `state:failed`, `variant:NAME` or words (id, variant, state, reason).
Enter applies it, an empty one shows every run again, escape leaves it as it was."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Label

from console.screens.form_dialog import FormDialog


class FilterDialog(FormDialog[str]):
    """Dismisses with the filter text ("" clears it) or None (cancelled)."""

    DEFAULT_CSS = """
    FilterDialog { align: center middle; }
    FilterDialog > Vertical { width: 64; max-width: 100%; height: auto; border: thick $primary;
                              background: $surface; padding: 0 1; }
    FilterDialog Label { width: 1fr; }
    """

    def __init__(self, current: str = "") -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Filter runs: state:failed, variant:NAME, or words (empty: all runs)")
            yield Input(value=self.current, placeholder="state:stopped lr", id="filter")

    def on_mount(self) -> None:
        self.query_one("#filter", Input).focus()

    def _confirm(self) -> None:
        self.dismiss(self.query_one("#filter", Input).value.strip())
