"""The plan: the frozen schedule against the rental window, with the other plans compared.

Rendered from `runner.campaign.plan.plan_campaign` (the planning side's own answer, as `campaign plan
--json` gives it); where that cannot be computed, the campaign file's phases are shown as written.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static


def plan_json(campaign) -> tuple[dict | None, str | None]:
    """The plan as `campaign plan --json` gives it, or (None, why not)."""
    if campaign is None:
        return None, "the campaign file could not be read"
    try:
        from runner.campaign.plan import plan_campaign

        return plan_campaign(campaign).to_json(), None
    except Exception as exc:  # the planner failing must not take the console down
        return None, f"the planner failed: {exc}"


def timeline(items: list[dict], window: float, width: int = 24) -> list[Text]:
    out = []
    for it in items:
        start, end = float(it.get("start_hours", 0)), float(it.get("end_hours", 0))
        a = int(start / window * width) if window else 0
        b = max(a + 1, int(round(end / window * width))) if window else 1
        over = end > window
        bar = Text(" " * min(a, width))
        bar.append(
            "█" * max(0, min(b, width) - a),
            style="red"
            if over
            else {"gpu": "green", "host": "blue", "human": "yellow"}.get(str(it.get("uses")), "white"),
        )
        if b > width:
            bar.append("▶", style="bold red")
        out.append(bar)
    return out


class PlanScreen(Screen):
    BINDINGS = [Binding("escape,q", "app.pop_screen", "back", id="plan.back")]
    DEFAULT_CSS = "PlanScreen Static { padding: 0 1; }"

    def __init__(self, campaign) -> None:
        super().__init__()
        self.campaign = campaign

    def compose(self) -> ComposeResult:
        data, why = plan_json(self.campaign)
        with VerticalScroll():
            if data is None:
                yield Static(Text(f"Plan: {why}; the phases as written:", style="yellow"))
                yield Static(self._phases_only())
            else:
                yield Static(self._summary(data))
                yield Static(self._items(data))
                if data.get("options"):
                    yield Static(self._options(data))
        yield Footer()

    def _summary(self, d: dict) -> Text:
        t = Text()
        t.append("Plan", style="bold")
        t.append(f" — window {d['window_hours']:g} h, committed {d['committed_hours']:g} h, ")
        if d.get("fits"):
            t.append(f"{d['uncommitted_hours']:g} h uncommitted", style="green")
        else:
            t.append(f"{d['over_hours']:g} h OVER the window", style="bold red")
        return t

    def _items(self, d: dict) -> Table:
        table = Table(box=None, expand=True, pad_edge=False)
        table.add_column("phase / run", overflow="ellipsis", no_wrap=True, ratio=3)
        table.add_column("uses", no_wrap=True)
        table.add_column("start-end h", justify="right", no_wrap=True)
        table.add_column("window", no_wrap=True, ratio=2)
        items = d.get("items") or []
        bars = timeline(items, float(d.get("window_hours") or 0), 20)
        for it, bar in zip(items, bars):
            table.add_row(
                str(it.get("name")),
                str(it.get("uses")),
                f"{float(it['start_hours']):.1f}-{float(it['end_hours']):.1f}",
                bar,
            )
        return table

    def _options(self, d: dict) -> Table:
        table = Table(title="other plans", box=None, expand=True, pad_edge=False, title_justify="left")
        table.add_column("plan", no_wrap=True)
        table.add_column("price", justify="right", no_wrap=True)
        table.add_column("fits", no_wrap=True)
        table.add_column("note", overflow="fold")
        for o in d["options"]:
            price = "no price" if o.get("price_usd") is None else f"${o['price_usd']:,.2f}"
            table.add_row(str(o.get("plan")), price, "yes" if o.get("fits") else "no", str(o.get("note") or ""))
        return table

    def _phases_only(self) -> Table:
        table = Table(box=None, expand=True)
        table.add_column("phase")
        table.add_column("uses")
        table.add_column("hours / variants")
        for ph in getattr(self.campaign, "phases", ()) or ():
            what = ", ".join(ph.variants) if ph.variants else f"{ph.hours:g} h"
            table.add_row(ph.name, ph.uses, what)
        return table
