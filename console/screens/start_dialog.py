"""Pick a declared variant to start (the runner only starts declared variants)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class StartDialog(ModalScreen[str | None]):
    """Dismisses with the variant name, or None."""

    DEFAULT_CSS = """
    StartDialog { align: center middle; }
    StartDialog > Vertical { width: 64; max-width: 100%; height: auto; max-height: 90%;
                             border: thick $primary; background: $surface; padding: 0 1; }
    StartDialog OptionList { height: auto; max-height: 14; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel", id="dialog.cancel")]

    def __init__(self, variants: list[dict], queue: list[str]) -> None:
        super().__init__()
        self.variants = variants
        self.queue = queue

    def compose(self) -> ComposeResult:
        options = []
        for v in self.variants:
            name = str(v.get("name"))
            label = Text(f"{name:<16} {str(v.get('category', '')):<12} {v.get('hours', '?')} h")
            runs = v.get("runs") or []
            if runs:
                label.append(f"  {len(runs)} run(s)", style="dim")
            if name in self.queue:
                label.append("  queued", style="cyan")
            options.append(Option(label, id=name))
        with Vertical():
            yield Label("Start which variant? (enter to start, escape to cancel)")
            yield OptionList(*options, id="variants")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
