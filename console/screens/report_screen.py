"""The closing report in the console: `runner.closing.report.build_report(campaign)` rendered from its
Markdown (the same page `campaign report --markdown` prints: conclusion first, budget, approved
count and cost per approved deliverable or "undefined", rejected runs with reasons, planned
against actual, decisions).

Building it verifies the deliverables, which reloads final checkpoints in child processes and can
take seconds: it runs in a thread worker, never on the UI thread, and `g` builds it again.
The console process itself never imports torch (the children do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rich.markdown import Markdown
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static


def build_markdown(campaign: Any, now: float | None = None) -> str:
    """The report's Markdown, built from the ledger (read-only) and the run folders."""
    return build_page(campaign, now)[1]


def build_page(campaign: Any, now: float | None = None) -> tuple[dict, str]:
    """The report's JSON (for the summary line) and its Markdown (the page)."""
    from runner.closing.report import build_report

    report = build_report(campaign, now=now)
    return report.to_json(), report.to_markdown()


def summary_line(data: dict) -> Text:
    """The figures a person looks for first, above the page: approved deliverables, the rental
    share per approved one (undefined, never zero, when none is), the committed cost, rejections."""
    text = Text()
    approved = int(data.get("approved") or 0)
    text.append(f"{approved} approved", style="bold green" if approved else "bold red")
    per = data.get("usd_per_approved")
    text.append(" · ")
    if per is None:
        text.append("cost per approved: undefined", style="bold red")
    else:
        text.append(f"{per:,.2f} USD per approved", style="bold")
    text.append(f" · committed {float(data.get('committed_usd') or 0):,.2f} USD")
    other = float(data.get("other_spend_usd") or 0)
    if other:
        text.append(f" + {other:,.2f} other")
    rejected = len(data.get("rejected") or [])
    if rejected:
        text.append(f" · {rejected} rejected", style="yellow")
    pending = len(data.get("pending") or [])
    if pending:
        text.append(f" · {pending} still running or queued", style="cyan")
    return text


if TYPE_CHECKING:
    from console.app import CampaignConsole


class ReportScreen(Screen):
    @property
    def console_app(self) -> CampaignConsole:
        """The app with its fields typed: this screen lives only inside the campaign console."""
        return cast("CampaignConsole", self.app)

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "back", id="report.back"),
        Binding("g", "rebuild", "rebuild", id="report.rebuild"),
    ]
    DEFAULT_CSS = """
    ReportScreen Static { padding: 0 1; }
    ReportScreen #report-status { color: $text-muted; }
    ReportScreen #report-summary { background: $boost; }
    """

    def __init__(self, campaign: Any, *, now: float | None = None) -> None:
        super().__init__()
        self.campaign = campaign
        self.now = now  # None: the app's clock (fixed in screenshots and tests)
        self.data: dict = {}
        self.markdown: str | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("", id="report-status")
            yield Static("", id="report-summary")
            yield Static("", id="report")
        yield Footer()

    def on_mount(self) -> None:
        self.action_rebuild()

    def action_rebuild(self) -> None:
        self.query_one("#report-status", Static).update(
            Text("building the report: verifying deliverables (final checkpoints reload in fresh processes)…")
        )
        self.build()

    @work(thread=True, exclusive=True, group="report")
    def build(self) -> None:
        now = self.now if self.now is not None else self.console_app.clock()
        try:
            (data, markdown), error = build_page(self.campaign, now), None
        except Exception as exc:  # shown, never a crash: the console keeps running
            data, markdown, error = {}, None, f"{type(exc).__name__}: {exc}"
        self.console_app.call_from_thread(self.show, data, markdown, error)

    def show(self, data: dict, markdown: str | None, error: str | None) -> None:
        self.data, self.markdown, self.error = data, markdown, error
        status = self.query_one("#report-status", Static)
        if error is not None:
            status.update(Text(f"cannot build the report: {error}", style="bold red"))
            return
        status.update(Text("closing report · g rebuilds · the same page: campaign report --markdown"))
        self.query_one("#report-summary", Static).update(summary_line(data))
        self.query_one("#report", Static).update(Markdown(markdown or "", hyperlinks=False))
