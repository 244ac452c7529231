"""One run in full: its frozen config, its rules and their state, its checkpoints (verified or
why not) and the last lines of its log — the runner's `run_detail` answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.fmt import as_float, fmt_bytes, fmt_loss, fmt_span
from console.source import SourceError
from console.widgets.runs.cells import fmt_amount, hours_unit
from runner.ledger.states import RuleStatus


def config_table(detail: dict) -> Table:
    cfg = detail.get("config") or {}
    variant = cfg.get("variant") or {}
    run = detail.get("run") or {}
    t = Table(box=None, show_header=False, pad_edge=False, expand=True)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row(
        "state",
        f"{run.get('state')}  step {_or_dash(run.get('step'))}  loss {fmt_loss(run.get('loss'))}"
        f"  attempts {run.get('attempts', '-')}  elapsed {fmt_span(run.get('elapsed_seconds'))}",
    )
    if run.get("stop_reason"):
        t.add_row("stopped", Text(str(run.get("stop_reason")), style="bold red"))
    if run.get("metrics_warning"):
        t.add_row("warning", Text(str(run["metrics_warning"]), style="bold yellow"))
    for key in ("category", "checkpoint_every", "gpus", "base_revision"):
        if variant.get(key) is not None:
            t.add_row(key, str(variant[key]))
    if run.get("planned_hours") is not None or variant.get("hours") is not None:
        t.add_row("time", time_words(run, variant))
    if variant.get("command"):
        t.add_row("command", " ".join(map(str, variant["command"])))
    if variant.get("resume_command"):
        t.add_row("resume", " ".join(map(str, variant["resume_command"])))
    if variant.get("expects"):
        t.add_row("expects", ", ".join(variant["expects"]))
    if cfg.get("env"):
        t.add_row("env", " ".join(f"{k}={v}" for k, v in cfg["env"].items()))
    return t


def _or_dash(value: object) -> object:
    """A figure not known yet (no metric line parsed) reads "-", never "None"."""
    return "-" if value is None else value


def time_words(run: dict, variant: dict) -> str:
    """Used, planned and expected time, in the run's unit (minutes when planned under an hour)."""
    planned = as_float(run.get("planned_hours"))
    planned = planned if planned is not None else as_float(variant.get("hours"))
    scale, unit = hours_unit(planned)
    used = as_float(run.get("elapsed_seconds"))
    words = [f"planned {fmt_amount(planned, scale)}{unit}"]
    if used is not None:
        words.insert(0, f"used {fmt_amount(used / 3600.0, scale)}{unit}")
    expected = as_float(run.get("expected_hours"))
    if expected is not None:
        words.append(f"expected {fmt_amount(expected, scale)}{unit}")
    return ", ".join(words)


def value_words(value, kind: str | None = None, state: str | None = None) -> str:
    """A rule's judged value, short: 4 significant digits for numbers. The time rules' values
    are not metrics (runner/daemon/status.py): `no_resume_point` gives the seconds left to save a
    verified checkpoint, or once one is verified its step; `stalled` the seconds since the last
    metric line. Bare, "waiting (104.6)" and "ok (2167)" meant nothing to the reader."""
    v = as_float(value)
    if v is None or isinstance(value, str):
        return str(value)
    if kind == "no_resume_point":
        return f"verified @{int(v)}" if state == "ok" else f"{fmt_span(v)} left"
    if kind == "stalled":
        return f"last metric {fmt_span(v)} ago"
    return f"{v:.4g}"


def rules_table(detail: dict) -> Table:
    states = {r.get("kind") + str(i): r for i, r in enumerate((detail.get("run") or {}).get("rules") or [])}
    t = Table(box=None, pad_edge=False, expand=True)
    t.add_column("rule", overflow="fold")
    t.add_column("state", no_wrap=True)
    rules = detail.get("rules") or []
    for i, r in enumerate(rules):
        live = states.get(str(r.get("kind")) + str(i), {})
        text = live.get("text") or " ".join(f"{k}={v}" for k, v in r.items())
        state = live.get("state") or "-"
        value = live.get("value")
        words = value_words(value, live.get("kind") or r.get("kind"), state)
        t.add_row(
            text,
            Text(
                state + (f" ({words})" if value is not None else ""),
                style="bold red" if state == RuleStatus.FIRED else "green" if state == RuleStatus.OK else "yellow",
            ),
        )
    if not rules:
        t.add_row("no rules apply to this run", "")
    return t


def checkpoints_table(detail: dict) -> Table:
    t = Table(box=None, pad_edge=False, expand=True)
    t.add_column("step", justify="right", no_wrap=True)
    t.add_column("size", justify="right", no_wrap=True)
    t.add_column("verified", overflow="fold")
    t.add_column("path", overflow="ellipsis", no_wrap=True)
    for c in (detail.get("checkpoints") or [])[-10:]:
        verified = c.get("verified")
        problems = c.get("problems") or c.get("problem") or ""
        if isinstance(problems, list):
            problems = "; ".join(map(str, problems))
        if verified:
            mark = Text(f"✓ {c.get('grade') or ''}", style="green")
        elif verified is None:
            mark = Text("not checked yet", style="yellow")
        else:
            mark = Text(f"✗ {problems or 'failed'}", style="red")
        path = str(c.get("path") or "")
        t.add_row(
            str(c.get("step", "-")), fmt_bytes(c.get("bytes")) if c.get("bytes") else "-", mark, path.rsplit("/", 1)[-1]
        )
    if not detail.get("checkpoints"):
        t.add_row("-", "-", Text("no checkpoint yet", style="yellow"), "")
    return t


if TYPE_CHECKING:
    from console.app import CampaignConsole


class RunDetailScreen(Screen):
    @property
    def console_app(self) -> CampaignConsole:
        """The app with its fields typed: this screen lives only inside the campaign console."""
        return cast("CampaignConsole", self.app)

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back", id="detail.back"),
        Binding("g", "reload", "reload", id="detail.reload"),
    ]
    DEFAULT_CSS = """
    RunDetailScreen Static { padding: 0 1; }
    RunDetailScreen .section { text-style: bold; background: $boost; }
    RunDetailScreen #log { color: $text-muted; }
    """

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"Run {self.run_id}", style="bold"), id="title")
            yield Static("loading…", id="config")
            yield Static("rules", classes="section")
            yield Static("", id="rules")
            yield Static("checkpoints", classes="section")
            yield Static("", id="checkpoints")
            yield Static("log (last lines)", classes="section")
            yield Static("", id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.load()

    @work(exclusive=True, group="detail")
    async def load(self) -> None:
        try:
            detail = await self.console_app.source.request("run_detail", run=self.run_id)
        except SourceError as exc:
            self.query_one("#config", Static).update(Text(f"cannot load the detail: {exc}", style="red"))
            return
        self.show(detail)

    def show(self, detail: dict) -> None:
        self.query_one("#config", Static).update(config_table(detail))
        self.query_one("#rules", Static).update(rules_table(detail))
        self.query_one("#checkpoints", Static).update(checkpoints_table(detail))
        lines = [str(x) for x in (detail.get("log_tail") or [])][-20:]
        self.query_one("#log", Static).update(Text("\n".join(lines) or "(empty)", no_wrap=True, overflow="ellipsis"))
