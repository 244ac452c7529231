"""The console's keys, each with an id a user keymap can remap (console/keymap.py), and the
command palette's list of the same actions. The pilot decision's key shows in the footer only once
there is a decision to take or revise (MainScreen.check_action); the palette always lists it."""

from __future__ import annotations

from textual.binding import Binding

# (id, default key, action on the main screen, footer label, palette help, shown in the footer)
ACTIONS: tuple[tuple[str, str, str, str, str, bool], ...] = (
    ("start_next", "n", "start_next", "next", "Start the next queued variant", True),
    ("start_variant", "s", "start_variant", "start", "Start a chosen variant", True),
    ("abort", "a", "abort", "abort", "Abort the selected run (asks for a reason)", True),
    ("resume", "r", "resume", "resume", "Resume the selected stopped or failed run", True),
    ("checkpoint", "c", "checkpoint", "ckpt", "Ask the selected run for a checkpoint now", True),
    ("detail", "d", "detail", "detail", "Open the selected run's detail", False),
    ("filter", "slash", "filter_runs", "filter", "Filter the runs table: state:X, variant:X or words", False),
    ("plan", "p", "plan", "plan", "Open the plan: schedule against the window", True),
    ("retrieval", "f", "retrieval", "files", "Open the retrieval screen: what must leave the host", True),
    ("decide", "D", "decide", "pilot", "Pilot decision: continue, cut to chosen variants, or revisit", True),
    ("wrap_up", "w", "wrap_up", "wrap-up", "Wrap-up before the deadline: move or cancel it", True),
    ("report", "R", "report", "report", "Open the closing report (budget, approved runs, conclusion)", False),
    ("plot_view", "v", "plot_view", "view", "Plot: selected vs control / all running", False),
    ("log_scale", "l", "log_scale", "log", "Plot: toggle log scale", False),
    ("smoothing", "m", "smoothing", "smooth", "Plot: cycle smoothing", False),
    ("quit", "q", "quit_console", "quit", "Quit the console (the runner and its runs go on)", True),
)

BINDING_IDS = {a[0] for a in ACTIONS}


def main_bindings() -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    return [
        Binding(key, action, label, show=show, id=bid, tooltip=help_)
        for bid, key, action, label, help_, show in ACTIONS
    ]
