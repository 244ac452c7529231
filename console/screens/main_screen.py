"""The operations view: bundle header and banners, GPUs, runs, loss curves, keys in the footer.

It holds no data of its own beyond what its widgets show; the app's tick hands it each new
snapshot (`show`). Actions act on the selected run and go to the runner through the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from console.bindings import main_bindings
from console.screens.abort_dialog import AbortDialog
from console.screens.start_dialog import StartDialog
from console.widgets.gpus.gpu_panel import GpuPanel
from console.widgets.header.bundle_header import BundleHeader
from console.widgets.header.hosts_panel import HostsPanel
from console.widgets.header.status_banner import (
    ConnectionBanner,
    ExpiryBanner,
    NotifyBanner,
    PilotBanner,
    WrapUpBanner,
)
from console.widgets.plots.loss_plot import LossPlot
from console.widgets.runs.runs_note import RunsNote
from console.widgets.runs.runs_table import RunsTable
from runner.ledger.states import PENDING_STATES, RESUMABLE_STATES, RunState

if TYPE_CHECKING:
    from console.app import CampaignConsole


FULL_FOOTER_COLUMNS = 80


class MainScreen(Screen):
    @property
    def console_app(self) -> CampaignConsole:
        """The app with its fields typed: this screen lives only inside the campaign console."""
        return cast("CampaignConsole", self.app)

    BINDINGS = main_bindings()

    def compose(self) -> ComposeResult:
        yield BundleHeader(id="header")
        yield HostsPanel(id="hosts")
        yield ExpiryBanner(id="expiry-banner")
        yield PilotBanner(id="pilot-banner")
        yield WrapUpBanner(id="wrap-up-banner")
        yield ConnectionBanner(id="connection-banner")
        yield NotifyBanner(id="notify-banner")
        yield GpuPanel(id="gpus")
        yield RunsTable(id="runs")
        yield RunsNote(id="runs-note")
        yield LossPlot(id="plot")
        yield Footer(compact=True)

    def __init__(self) -> None:
        super().__init__()
        self._pilot_state: str | None = None
        self._wrap_phase: str | None = None
        self._queue_title: str | None = None

    def on_mount(self) -> None:
        self.query_one(RunsTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        """Below 80 columns the footer's keys reach its right edge, where Textual docks the palette
        key over them (leaving a stray letter): there the palette key is left out (ctrl+p still works)."""
        self.query_one(Footer).show_command_palette = event.size.width >= FULL_FOOTER_COLUMNS

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """The pilot key is in the footer (and live) once a decision is awaited or taken."""
        if action == "decide":
            return self._pilot_state in ("awaiting_decision", "decided")
        if action == "wrap_up":  # in the footer once the runner has a wrap-up to move or cancel
            return self._wrap_phase in ("scheduled", "running", "cancelled", "done")
        return True

    # -- data in ------------------------------------------------------------------------------
    def show(
        self,
        snapshot: dict,
        expiry,
        reading,
        *,
        down: str | None,
        down_hint: str | None = None,
        tries: int,
        last_seen: float | None,
        now: float,
        control_variant: str | None,
        tz=None,
        changed: list[dict] | None = None,
    ) -> None:
        """`changed`: the runs that changed since the last call (None: `snapshot` holds them all)."""
        self.query_one(BundleHeader).show(snapshot, expiry, tz)
        self.query_one(HostsPanel).show(snapshot.get("hosts"), now)
        self.query_one(ExpiryBanner).show(expiry, snapshot.get("retrieval"), tz)
        pilot = snapshot.get("pilot") or None
        self.query_one(PilotBanner).show(pilot, now, tz)
        pilot_state = (pilot or {}).get("state")
        if pilot_state != self._pilot_state:
            self._pilot_state = pilot_state
            self.refresh_bindings()
        self.query_one(ConnectionBanner).show(down, tries, last_seen, now, hint=down_hint)
        self.query_one(NotifyBanner).show((snapshot.get("runner") or {}).get("notify"))
        self.query_one(WrapUpBanner).show(snapshot, now)
        wrap_phase = ((snapshot.get("runner") or {}).get("wrap_up") or {}).get("phase")
        if wrap_phase != self._wrap_phase:
            self._wrap_phase = wrap_phase
            self.refresh_bindings()
        self.query_one(GpuPanel).show(reading)
        table = self.query_one(RunsTable)
        table.show(snapshot.get("runs") or [] if changed is None else changed, full=changed is None)
        queue = snapshot.get("queue") or []
        title = f"queue: {', '.join(queue)}" if queue else None
        if title != self._queue_title:  # setting a border title repaints the whole table
            self._queue_title = table.border_title = title
        self.query_one(LossPlot).set_runs(table.selected_run, control_variant)

    @property
    def selected_run(self) -> str | None:
        return self.query_one(RunsTable).selected_run

    def selected_row(self) -> dict | None:
        rid = self.selected_run
        return self.console_app.rows.get(rid) if rid is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        plot = self.query_one(LossPlot)
        selected = event.row_key.value if event.row_key is not None else None
        if selected != plot.selected:
            plot.selected = selected
            plot.refresh()
            self.console_app.read_curves_soon()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_detail()

    # -- actions ------------------------------------------------------------------------------
    async def action_start_next(self) -> None:
        """The first queued variant, else the first declared variant that has no run yet."""
        snap = self.console_app.snapshot or {}
        queue = snap.get("queue") or []
        fresh = [v.get("name") for v in snap.get("variants") or [] if not v.get("runs")]
        name = queue[0] if queue else (fresh[0] if fresh else None)
        if name is None:
            self.notify("nothing left to start: every variant has a run (s starts a chosen one)", severity="warning")
            return
        await self.console_app.act("start", "start", variant=name)

    def action_start_variant(self) -> None:
        snap = self.console_app.snapshot or {}
        variants = snap.get("variants") or []
        if not variants:
            self.notify("no variants known yet (the runner has not answered)", severity="warning")
            return

        async def chosen(name: str | None) -> None:
            if name:
                await self.console_app.act("start", "start", variant=name)

        self.console_app.push_screen(StartDialog(variants, snap.get("queue") or []), chosen)

    def action_abort(self) -> None:
        row = self.selected_row()
        if row is None:
            self.notify("select a run first", severity="warning")
            return
        if row.get("state") not in PENDING_STATES:
            self.notify(f"{row['id']} is {row.get('state')}: nothing to abort", severity="warning")
            return

        async def confirmed(reason: str | None) -> None:
            if reason:
                await self.console_app.act("abort", "abort", run=row["id"], reason=reason)

        self.console_app.push_screen(AbortDialog(row["id"]), confirmed)

    async def action_resume(self) -> None:
        row = self.selected_row()
        if row is None:
            self.notify("select a run first", severity="warning")
            return
        if row.get("state") not in RESUMABLE_STATES:
            self.notify(
                f"{row['id']} is {row.get('state')}: only stopped, failed or aborted runs resume", severity="warning"
            )
            return
        await self.console_app.act("resume", "resume", run=row["id"])

    async def action_checkpoint(self) -> None:
        row = self.selected_row()
        if row is None or row.get("state") != RunState.RUNNING:
            self.notify("select a running run to checkpoint", severity="warning")
            return
        await self.console_app.act("checkpoint", "checkpoint", run=row["id"])

    def action_detail(self) -> None:
        rid = self.selected_run
        if rid is None:
            self.notify("no run selected", severity="warning")
            return
        from console.screens.run_detail import RunDetailScreen

        self.console_app.push_screen(RunDetailScreen(rid))

    def action_filter_runs(self) -> None:
        from console.screens.filter_dialog import FilterDialog

        table = self.query_one(RunsTable)

        def chosen(text: str | None) -> None:
            if text is not None:
                table.set_filter(text)

        self.app.push_screen(FilterDialog(table.selection.filter.text), chosen)

    def action_plan(self) -> None:
        from console.screens.plan_screen import PlanScreen

        self.console_app.push_screen(PlanScreen(self.console_app.campaign))

    def action_retrieval(self) -> None:
        from console.screens.retrieval_screen import RetrievalScreen

        self.console_app.push_screen(
            RetrievalScreen(
                self.console_app.snapshot or {},
                self.console_app.output_dir,
                now=self.console_app.clock(),
                tz=self.console_app.tz,
                ssh=self.console_app.ssh,
            )
        )

    def action_wrap_up(self) -> None:
        from console.screens.wrapup_dialog import WrapUpDialog
        from console.wrapup_view import wrap_up_of

        wrap = wrap_up_of(self.console_app.snapshot or {})
        if wrap is None:
            self.notify(
                'no wrap-up set: add wrap_up = "45m" to [bundle] (or `campaign wrap-up --at`)', severity="warning"
            )
            return

        async def chosen(answer: dict | None) -> None:
            if answer:
                await self.console_app.act("wrap_up", "wrap-up", who="console", **answer)

        self.console_app.push_screen(WrapUpDialog(wrap, self.console_app.clock()), chosen)

    def action_decide(self) -> None:
        snap = self.console_app.snapshot or {}
        pilot = snap.get("pilot")
        if not pilot:
            self.notify(
                "no pilot status yet: nothing has been launched (or the runner has no pilot)", severity="warning"
            )
            return
        from console.pilot_view import who
        from console.screens.pilot_dialog import PilotDialog

        async def chosen(answer: dict | None) -> None:
            if answer:
                await self.console_app.act("decide", "the decision", who=who(), **answer)

        self.console_app.push_screen(PilotDialog(pilot, snap.get("variants") or [], tz=self.console_app.tz), chosen)

    def action_report(self) -> None:
        if self.console_app.campaign is None:
            self.notify("no campaign file known to this console: no report", severity="warning")
            return
        from console.screens.report_screen import ReportScreen

        self.console_app.push_screen(ReportScreen(self.console_app.campaign))

    def action_plot_view(self) -> None:
        plot = self.query_one(LossPlot)
        plot.show_all = not plot.show_all
        self.console_app.read_curves_soon()

    def action_log_scale(self) -> None:
        plot = self.query_one(LossPlot)
        plot.log_scale = not plot.log_scale

    def action_smoothing(self) -> None:
        plot = self.query_one(LossPlot)
        plot.smoothing_index = (plot.smoothing_index + 1) % 3

    def action_quit_console(self) -> None:
        self.console_app.exit(0)
