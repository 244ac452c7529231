"""The pilot decision: the re-estimate it is taken on, then continue, cut to chosen variants, or
revisit the question, with a note. It only gathers the answer; the main screen sends the `decide`
op (the runner records who decided what and when, and cuts the queue)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import (
    Button,
    Input,
    Label,
    RadioButton,
    RadioSet,
    SelectionList,
    Static,
)

from console.pilot_view import (
    cut_candidates,
    decision_words,
    estimate_summary,
    estimate_table,
)
from console.screens.form_dialog import FormDialog

CHOICES = (
    ("continue", "continue: run the rest as planned"),
    ("cut", "cut to the variants ticked below (the others not yet run leave the queue)"),
    ("revisit", "revisit the question (recorded; nothing is cut)"),
)


class PilotDialog(FormDialog[dict]):
    """Dismisses with {"choice", "variants", "note"} or None (cancelled)."""

    DEFAULT_CSS = """
    PilotDialog { align: center middle; }
    PilotDialog > VerticalScroll { width: 78; max-width: 100%; height: auto; max-height: 100%;
                                   border: thick $warning; background: $surface; padding: 0 1; }
    PilotDialog #estimate, PilotDialog #estimate-table, PilotDialog #last { margin: 0 0 1 0; }
    PilotDialog #estimate-table { padding: 0 0 0 2; }
    PilotDialog RadioSet { width: 100%; height: auto; }
    PilotDialog RadioButton { height: 1; margin: 0; padding: 0; }
    PilotDialog SelectionList { height: auto; max-height: 6; margin: 0 0 0 4; }
    PilotDialog Input { margin: 0; }
    PilotDialog Horizontal { height: auto; align-horizontal: right; }
    PilotDialog Button { margin: 0 0 0 1; min-width: 10; }
    """

    def __init__(self, pilot: dict, variants: list[dict], tz=None) -> None:
        super().__init__()
        self.pilot = pilot
        self.variants = variants
        self.tz = tz

    def compose(self) -> ComposeResult:
        p = self.pilot
        with VerticalScroll():
            head = (
                "Pilot over: decide how to go on"
                if p.get("state") == "awaiting_decision"
                else "Pilot decision" + (" (pilot still running)" if p.get("state") == "running" else "")
            )
            yield Label(f"[b]{head}[/b]  ({p.get('basis') or 'pilot'})")
            if p.get("question"):
                yield Static(f"Question: {p['question']}", id="question")
            yield Static(estimate_summary(p.get("estimate"), self.tz), id="estimate")
            yield Static(estimate_table(p.get("estimate")), id="estimate-table")
            if p.get("decision"):
                yield Static(f"Last decision: {decision_words(p['decision'])}", id="last")
            with RadioSet(id="choice", compact=True):
                for i, (value, label) in enumerate(CHOICES):
                    yield RadioButton(label, value=i == 0, id=f"choice-{value}")
            yield SelectionList[str](*cut_candidates(p, self.variants), id="keep", compact=True, disabled=True)
            yield Input(placeholder="note (why; kept with the decision)", id="note", compact=True)
            with Horizontal():
                yield Button("Record decision", variant="warning", id="confirm", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one(RadioSet).focus()

    @property
    def choice(self) -> str:
        pressed = self.query_one(RadioSet).pressed_button
        return (pressed.id or "choice-continue").removeprefix("choice-") if pressed else "continue"

    def on_radio_set_changed(self, event: RadioSet.Changed) -> None:
        event.stop()
        self.query_one("#keep", SelectionList).disabled = self.choice != "cut"

    def _confirm(self) -> None:
        choice = self.choice
        kept = list(self.query_one("#keep", SelectionList).selected) if choice == "cut" else []
        if choice == "cut" and not kept:
            self.notify("a cut keeps at least one variant: tick the ones to keep", severity="warning")
            return
        note = self.query_one("#note", Input).value.strip() or None
        self.dismiss({"choice": choice, "variants": kept, "note": note})
