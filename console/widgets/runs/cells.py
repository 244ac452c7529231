"""What each cell of the runs table says about a run, in two widths: `compact` for an 80-column
SSH terminal (category as one letter before the id, hours as "0.4/1.0h"), `full` for wider ones
(every column spelled out). Kept apart from the widget so the wording is tested without a screen.

Every function returns a Rich `Text`; the table pads and crops them to their column's width.
"""

from __future__ import annotations

import math

from rich.text import Text

from console.fmt import as_float, fmt_loss, format_duration
from runner.ledger.states import ACTIVE_STATES, ENDED_WITH_REASON, RuleStatus, RunState

STATE_STYLE: dict[str, str] = {
    RunState.RUNNING: "bold green",
    RunState.QUEUED: "cyan",
    RunState.FINISHED: "blue",
    RunState.FAILED: "bold red",
    RunState.STOPPED: "bold magenta",
    RunState.ABORTED: "yellow",
    RunState.REFUSED: "red",
}
CATEGORY_MARK = {"essential": "E", "useful": "U", "exploratory": "X"}
CATEGORY_STYLE = {"essential": "bold", "useful": "", "exploratory": "magenta"}


def id_cell(run: dict, compact: bool) -> Text:
    state = run.get("state")
    text = Text()
    if compact:
        cat = str(run.get("category") or "")
        text.append(CATEGORY_MARK.get(cat, "?"), style=CATEGORY_STYLE.get(cat, "dim"))
        text.append(" ")
    text.append(str(run.get("id")), style="bold" if state in ACTIVE_STATES else "")
    return text


def category_cell(run: dict) -> Text:
    cat = str(run.get("category") or "-")
    return Text(cat, style=CATEGORY_STYLE.get(cat, ""))


def state_cell(run: dict) -> Text:
    state = str(run.get("state") or "?")
    return Text(state, style=STATE_STYLE.get(state, ""))


def step_cell(run: dict, compact: bool) -> Text:
    step = run.get("step")
    if step is None:
        return Text("-", style="dim")
    n = int(step)
    if compact and n >= 1_000_000:
        return Text(f"{n / 1e6:.1f}M" if n < 10_000_000 else f"{n / 1e6:.0f}M")
    if compact and n >= 10_000:
        return Text(f"{n / 1e3:.1f}k" if n < 100_000 else f"{n / 1e3:.0f}k")
    return Text(f"{n:,}")


def loss_cell(run: dict, compact: bool) -> Text:
    if run.get("metrics_warning") and run.get("loss") is None:  # its regex matches, parses nothing
        return Text("⚠ none", style="bold yellow")  # fits the 6-column cell; the detail says why
    v = as_float(run.get("loss"))
    if compact and v is not None and math.isfinite(v) and v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        text = f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
    else:
        text = fmt_loss(run.get("loss"))
    return Text(text, style="bold red" if text in ("NaN", "inf", "-inf") else "")


def hours_unit(planned: float | None) -> tuple[float, str]:
    """Minutes for runs planned under an hour (the demo's are minutes long), hours otherwise."""
    return (60.0, "m") if planned is not None and planned < 1 else (1.0, "h")


def fmt_amount(value: float | None, scale: float) -> str:
    if value is None:
        return "-"
    v = value * scale
    return f"{v:.1f}" if v < 10 else f"{v:.0f}"


def overrun_style(run: dict) -> str:
    """Yellow when the run is expected to take longer than planned, red once it has."""
    planned = as_float(run.get("planned_hours"))
    expected = as_float(run.get("expected_hours"))
    elapsed = as_float(run.get("elapsed_seconds"))
    if planned is None or planned <= 0:
        return ""
    if elapsed is not None and elapsed / 3600.0 > planned * 1.05:
        return "bold red"
    if expected is not None and expected > planned * 1.05:
        return "yellow"
    return ""


def hours_cell(run: dict) -> Text:
    """Compact: time used over time planned, one unit, e.g. "0.4/1.0h" or "1.4/2.4m"."""
    planned = as_float(run.get("planned_hours"))
    elapsed = as_float(run.get("elapsed_seconds"))
    scale, unit = hours_unit(planned)
    never_ran = run.get("state") == RunState.QUEUED or (not elapsed and run.get("launched_at") is None)
    used = None if elapsed is None or never_ran else elapsed / 3600.0
    if used is None and planned is None:
        return Text("-", style="dim")
    return Text(f"{fmt_amount(used, scale)}/{fmt_amount(planned, scale)}{unit}", style=overrun_style(run))


def elapsed_cell(run: dict) -> Text:
    secs = as_float(run.get("elapsed_seconds"))
    if secs is None:
        return Text("-", style="dim")
    if secs >= 86400:
        d, rest = divmod(int(secs), 86400)
        return Text(f"{d}d {rest // 3600:02d}:{rest % 3600 // 60:02d}", style=overrun_style(run))
    return Text(format_duration(secs), style=overrun_style(run))


def planned_cell(run: dict, key: str) -> Text:
    """`planned_hours` or `expected_hours` in the run's unit (minutes under an hour planned)."""
    value = as_float(run.get(key))
    if value is None:
        return Text("-", style="dim")
    scale, unit = hours_unit(as_float(run.get("planned_hours")))
    return Text(f"{fmt_amount(value, scale)}{unit}", style=overrun_style(run) if key == "expected_hours" else "")


def checkpoint_cell(run: dict) -> Text:
    """Running: the countdown to the next checkpoint, an alarm once overdue. Otherwise the latest
    checkpoint's step and whether it was verified (what a resume would start from)."""
    if run.get("state") not in ACTIVE_STATES:
        step = run.get("checkpoint_step")
        if step is None:
            return Text("-", style="dim")
        ok = run.get("checkpoint_verified")
        if ok is False:  # graded and refused: not a resume point
            return Text(f"@{step} ✗", style="red")
        return Text(f"@{step}" + (" ✓" if ok else " ?"), style="green" if ok else "yellow")
    secs = as_float(run.get("next_checkpoint_seconds"))
    if secs is None:
        return Text("-", style="dim")
    if secs < 0:
        return Text(f"LATE {format_duration(-secs)}", style="bold white on red")
    return Text(format_duration(secs), style="yellow" if secs < 60 else "")


def rules_cell(run: dict) -> Text:
    """Every rule ok (or still waiting to be judged), or the one that fired with its value; a run
    that ended early keeps its reason."""
    state = run.get("state")
    if state in ENDED_WITH_REASON and (run.get("stop_reason") or run.get("stop_rule")):
        reason = run.get("stop_reason") or run.get("stop_rule")
        return Text(f"✗ {reason}", style="bold red" if state == RunState.STOPPED else "yellow")
    rules = run.get("rules") or []
    fired = [r for r in rules if r.get("state") == RuleStatus.FIRED]
    if fired:
        r = fired[0]
        value = r.get("value")
        return Text(
            f"✗ {r.get('text') or r.get('kind')}" + (f" ({value})" if value is not None else ""), style="bold red"
        )
    if not rules:
        return Text("-", style="dim")
    if state == RunState.QUEUED:  # nothing to judge before it runs
        return Text(f"{len(rules)} rule{'' if len(rules) == 1 else 's'}", style="dim")
    waiting = sum(1 for r in rules if r.get("state") == RuleStatus.WAITING)
    ok = len(rules) - waiting
    return Text(f"{ok}/{len(rules)} ok" + (f", {waiting} wait" if waiting else ""), style="green")


def row_cells(run: dict, compact: bool) -> dict[str, Text]:
    """Every cell of the run's row, by column key (the layout picks which keys it shows)."""
    return {
        "id": id_cell(run, compact),
        "cat": category_cell(run),
        "state": state_cell(run),
        "step": step_cell(run, compact),
        "loss": loss_cell(run, compact),
        "hours": hours_cell(run),
        "elapsed": elapsed_cell(run),
        "planned": planned_cell(run, "planned_hours"),
        "expected": planned_cell(run, "expected_hours"),
        "ckpt": checkpoint_cell(run),
        "rules": rules_cell(run),
    }
