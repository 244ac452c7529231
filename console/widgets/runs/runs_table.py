"""Every run of the campaign, one row each, updated cell by cell by row key (no rebuilds, so the
cursor and scroll stay where the user left them). Stopped, aborted and failed runs stay, with
their reason in the rules column."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from console.fmt import as_float, fmt_hours, fmt_loss, format_duration

# the order puts what matters most within 80 columns; the rest scrolls
COLUMNS = (("id", "run"), ("state", "state"), ("step", "step"), ("loss", "loss"), ("ckpt", "next ckpt"),
           ("rules", "rules"), ("elapsed", "elapsed"), ("hours", "h plan/exp"), ("cat", "cat"))
STATE_STYLE = {"running": "bold green", "queued": "cyan", "finished": "blue", "failed": "bold red",
               "stopped": "bold magenta", "aborted": "yellow", "refused": "red"}
CATEGORY_SHORT = {"essential": "ess", "useful": "use", "exploratory": "exp"}
ACTIVE = ("running",)


def checkpoint_cell(run: dict) -> Text:
    if run.get("state") not in ACTIVE:
        step = run.get("checkpoint_step")
        if step is None:
            return Text("-", style="dim")
        ok = run.get("checkpoint_verified")
        return Text(f"@{step}" + (" ✓" if ok else " ?"), style="green" if ok else "yellow")
    secs = as_float(run.get("next_checkpoint_seconds"))
    if secs is None:
        return Text("-", style="dim")
    if secs < 0:
        return Text(f"LATE {format_duration(-secs)}", style="bold white on red")
    return Text(format_duration(secs), style="yellow" if secs < 60 else "")


def rules_cell(run: dict) -> Text:
    state = run.get("state")
    if state in ("stopped", "aborted", "failed", "refused") and (run.get("stop_reason") or run.get("stop_rule")):
        reason = run.get("stop_reason") or run.get("stop_rule")
        return Text(f"✗ {reason}", style="bold red" if state == "stopped" else "yellow")
    rules = run.get("rules") or []
    fired = [r for r in rules if r.get("state") == "fired"]
    if fired:
        r = fired[0]
        value = r.get("value")
        return Text(f"✗ {r.get('text') or r.get('kind')}" + (f" ({value})" if value is not None else ""),
                    style="bold red")
    if not rules:
        return Text("-", style="dim")
    waiting = sum(1 for r in rules if r.get("state") == "waiting")
    ok = len(rules) - waiting
    return Text(f"{ok}/{len(rules)} ok" + (f", {waiting} waiting" if waiting else ""), style="green")


def row_cells(run: dict) -> dict[str, object]:
    state = str(run.get("state") or "?")
    planned = as_float(run.get("planned_hours"))
    expected = as_float(run.get("expected_hours"))
    loss = fmt_loss(run.get("loss"))
    return {
        "id": Text(str(run.get("id")), style="bold" if state in ACTIVE else ""),
        "cat": CATEGORY_SHORT.get(str(run.get("category")), str(run.get("category") or "-")),
        "state": Text(state, style=STATE_STYLE.get(state, "")),
        "step": "-" if run.get("step") is None else f"{int(run['step']):,}",
        "loss": Text(loss, style="bold red" if loss in ("NaN", "inf", "-inf") else ""),
        "elapsed": format_duration(as_float(run.get("elapsed_seconds"))),
        "hours": f"{fmt_hours(planned)}/{fmt_hours(expected)}",
        "ckpt": checkpoint_cell(run),
        "rules": rules_cell(run),
    }


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable { height: auto; max-height: 45%; min-height: 3; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show(self, runs: list[dict]) -> None:
        """Add new runs, update changed cells, keep rows of runs no longer reported."""
        for run in runs:
            run_id = str(run.get("id"))
            cells = row_cells(run)
            if run_id not in self.rows:
                self.add_row(*(cells[key] for key, _ in COLUMNS), key=run_id)
                continue
            for key, _ in COLUMNS:
                value = cells[key]
                if self.get_cell(run_id, key) != value:
                    self.update_cell(run_id, key, value, update_width=True)

    @property
    def selected_run(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:
            return None
        return key.value if key is not None else None
