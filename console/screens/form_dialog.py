"""What every confirm/cancel dialog shares: escape or the Cancel button dismisses with None; Enter
in an input or the button with id "confirm" runs the subclass's `_confirm`, which validates and
dismisses with the answer (or says what is missing and stays open)."""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Button, Input

T = TypeVar("T")


class FormDialog(ModalScreen[T | None], Generic[T]):
    BINDINGS = [Binding("escape", "cancel", "cancel", id="dialog.cancel")]

    def _confirm(self) -> None:
        raise NotImplementedError

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._confirm()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "confirm":
            self._confirm()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
