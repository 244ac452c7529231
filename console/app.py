"""The console app and its factory.

`make_app(source=..., nvml=..., clock=...)` builds it around a status source (the live runner, or
a recorded snapshot), an NVML session (real, or recorded answers in tests) and a clock (real, or
fixed). Each tick takes the source's update (the state and the runs that changed), samples the
GPUs and reads new metric lines off the UI thread, then updates what changed on screen; the next
tick is scheduled only when this one has finished, so a slow runner or disk never piles polls up.
Tests pass `auto_tick=False` and call `tick()`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App

from console.bindings import BINDING_IDS
from console.commands import ConsoleActions
from console.expiry import expiry_at
from console.gpu_sampler import GpuReading, GpuSampler
from console.keymap import load_keymap
from console.screens.main_screen import MainScreen
from console.source import SourceDown, SourceError, StatusSource
from console.widgets.plots.loss_plot import LossPlot
from runner.ledger.states import RunState


class CampaignConsole(App):
    TITLE = "campaign console"
    COMMANDS = App.COMMANDS | {ConsoleActions}
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        source: StatusSource,
        *,
        campaign: Any = None,
        nvml: Any = None,
        clock: Callable[[], float] | None = None,
        refresh_seconds: float = 1.0,
        auto_tick: bool = True,
        tz: dt.tzinfo | None = None,
        keymap: dict | None = None,
        ssh: dict | None = None,
        process_every: float = 5.0,
    ) -> None:
        super().__init__()
        self.source = source
        self.campaign = campaign
        self.clock: Callable[[], float] = clock or time.time
        self.refresh_seconds = refresh_seconds
        self.auto_tick = auto_tick
        self.tz = tz
        self.ssh = ssh or {}
        self.sampler = GpuSampler(nvml, process_every=process_every)
        self.snapshot: dict | None = None
        self.gpu_reading: GpuReading | None = None
        self.down: str | None = None
        self.down_hint: str | None = None  # what fixes it (the runner's `campaign up` command)
        self.rows: dict[str, dict] = {}  # run id -> its row, as last received
        self.tries = 0
        self.last_seen: float | None = None
        self.ticks = 0
        self.main_screen: MainScreen | None = None
        self._ticking = False
        self._curves_lock = asyncio.Lock()  # the metric files are read by one thread at a time
        self._states: dict[str, str] = {}
        self._metrics_warned: set[str] = set()  # runs whose regex-follows-nothing warning was toasted
        self.actions: list[tuple[str, dict]] = []  # what was asked of the runner, in order
        self.user_keymap: dict = dict(keymap or {})  # binding id -> keys, as the palette shows them
        if keymap:
            self.set_keymap(keymap)

    # -- facts from the campaign file ----------------------------------------------------------
    @property
    def output_dir(self) -> str:
        return getattr(self.campaign, "output_dir", None) or "deliverables"

    @property
    def control_variant(self) -> str | None:
        decision = getattr(self.campaign, "decision", None)
        if decision is not None:
            return decision.control
        return "control"

    @property
    def warn_hours(self) -> float | None:
        bundle = getattr(self.campaign, "bundle", None)
        return getattr(bundle, "warn_hours", None)

    # -- lifecycle ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.main_screen = MainScreen()
        self.push_screen(self.main_screen)
        if self.auto_tick:
            start = getattr(self.source, "start", None)  # a live source subscribes at once
            if callable(start):
                start()
            self.call_after_refresh(self._auto_tick)

    async def _auto_tick(self) -> None:
        try:
            await self.tick()
        finally:
            if self.is_running:
                self.set_timer(self.refresh_seconds, self._auto_tick)

    async def tick(self) -> None:
        """One refresh: status, GPUs and metric lines, then the screen. Never overlaps itself."""
        screen = self.main_screen
        if self._ticking or screen is None:
            return
        self._ticking = True
        try:
            await self._tick(screen)
        finally:
            self._ticking = False

    async def _tick(self, screen: MainScreen) -> None:
        now = self.clock()
        changed: list[dict] | None = []
        try:
            update = await self.source.update()
        except SourceError as exc:
            if isinstance(exc, SourceDown) and self.down is None:
                self.notify("lost the runner: reconnecting", severity="warning")
            self.down, self.down_hint = exc.reason, exc.hint
            self.tries += 1
        else:
            if self.down is not None and self.last_seen is not None:
                self.notify("runner reconnected")
            self.down, self.down_hint, self.tries, self.last_seen = None, None, 0, now
            changed = update.changed
            if changed is None:
                self.rows = {str(r.get("id")): r for r in update.snapshot.get("runs") or []}
            else:
                self.rows.update((str(r.get("id")), r) for r in changed)
            self._announce(update.snapshot.get("runs") or [] if changed is None else changed)
            self.snapshot = update.snapshot
        snap = self.snapshot or {}
        plot = screen.query_one(LossPlot)
        plot.take_runs(self.rows.values() if changed is None else changed, full=changed is None)
        pids = {rid: (self.rows.get(rid) or {}).get("pid") for rid in plot.running}
        root = (snap.get("campaign") or {}).get("root") or (str(self.campaign.root) if self.campaign else None)
        async with self._curves_lock:
            self.gpu_reading, batch = await asyncio.to_thread(self._sample_off_thread, pids, root, plot)
            plot.apply(batch)
        expiry = expiry_at(snap.get("bundle") or {}, now, self.warn_hours)
        screen.show(
            snap,
            expiry,
            self.gpu_reading,
            down=self.down,
            down_hint=self.down_hint,
            tries=self.tries,
            last_seen=self.last_seen,
            now=now,
            control_variant=self.control_variant,
            tz=self.tz,
            changed=changed,
        )
        # curves shown from this tick on (a new selection, the first frame), read to their end now
        missing: dict[str, str | None] = {rid: d for rid, d in plot.wanted().items() if d and rid not in batch}
        if missing:
            async with self._curves_lock:
                plot.apply(await asyncio.to_thread(plot.tails.read, missing))
        self.ticks += 1

    def read_curves_soon(self) -> None:
        """A curve is shown from now on (another run selected, the `v` view): read its file now,
        off the UI thread, rather than at the next tick. Only the curves drawn are read each tick,
        so a run selected next may have fallen behind."""
        self.run_worker(self._read_curves(), group="curves")

    async def _read_curves(self) -> None:
        screen = self.main_screen
        if screen is None:
            return
        plot = screen.query_one(LossPlot)
        async with self._curves_lock:  # one reader of the metric files at a time
            wanted: dict[str, str | None] = {rid: d for rid, d in plot.wanted().items() if d}
            if wanted:
                plot.apply(await asyncio.to_thread(plot.tails.read, wanted))

    def _sample_off_thread(self, pids: dict, root: str | None, plot: LossPlot) -> tuple[GpuReading, dict]:
        return self.sampler.read(pids, root), plot.read_new()

    def _announce(self, rows: list[dict]) -> None:
        """A toast when a run stops, fails or finishes (the table keeps the reason), and once per run
        whose metrics regex gives no numbers, from the first state on."""
        first = not self._states  # the first state: no change to announce, only states to note
        for r in rows:
            rid = str(r.get("id"))
            if r.get("metrics_warning") and rid not in self._metrics_warned:  # said once, first state too
                self._metrics_warned.add(rid)
                self.notify(f"{rid}: {r['metrics_warning']}", severity="warning", timeout=15)
        if first:
            self._states.update((str(r.get("id")), str(r.get("state"))) for r in rows)
            return
        for r in rows:
            rid, state = str(r.get("id")), str(r.get("state"))
            before = self._states.get(rid)
            self._states[rid] = state
            if before is None or before == state or not self.last_seen:
                continue
            if state == RunState.STOPPED:
                self.notify(
                    f"{rid} stopped by a rule: {r.get('stop_reason') or r.get('stop_rule')}",
                    severity="error",
                    timeout=10,
                )
            elif state in (RunState.FAILED, RunState.REFUSED):
                self.notify(f"{rid} {state}: {r.get('stop_reason') or ''}", severity="error", timeout=10)
            elif state == RunState.FINISHED:
                self.notify(f"{rid} finished")

    # -- actions go to the runner ---------------------------------------------------------------
    async def act(self, op: str, what: str, **args: Any) -> Any:
        """Send one action to the runner and say what it answered."""
        self.actions.append((op, args))
        try:
            result = await self.source.request(op, **args)
        except SourceError as exc:
            self.notify(f"{what} refused: {exc}", severity="error", timeout=8)
            return None
        self.notify(describe_result(op, args, result))
        if self.auto_tick:
            self.call_later(self.tick)
        return result

    async def on_unmount(self) -> None:
        try:
            await self.source.close()
        except Exception:
            pass


def describe_result(op: str, args: dict, result: Any) -> str:
    r = result if isinstance(result, dict) else {}
    run = r.get("run") or args.get("run") or args.get("variant")
    if op == "checkpoint":
        return f"{run}: checkpoint requested"
    if op == "wrap_up":
        return "wrap-up cancelled" if r.get("phase") == "cancelled" else f"wrap-up at {r.get('at')}"
    if op == "decide":
        from console.pilot_view import decision_words

        return f"decision recorded: {decision_words(r or args)}"
    state = r.get("state")
    if op == "start" and state == RunState.QUEUED:
        return f"{run}: queued ({r.get('note') or 'starts when a slot is free'})"
    return f"{op} {run}: {state}" if state else f"{op} {run}: done"


def make_app(
    source: StatusSource | None = None,
    *,
    campaign_file: str | Path | None = None,
    campaign: Any = None,
    nvml: Any = None,
    clock: Callable[[], float] | None = None,
    refresh_seconds: float = 1.0,
    auto_tick: bool = True,
    tz: dt.tzinfo | None = None,
    keymap: dict | None = None,
    ssh: dict | None = None,
    process_every: float = 5.0,
    use_user_keymap: bool = True,
) -> CampaignConsole:
    """The console for a campaign: `source` defaults to the runner of `campaign_file`'s folder.
    The user's keymap file is applied unless `keymap` is given or `use_user_keymap` is False."""
    if campaign is None and campaign_file is not None:
        from runner.campaign.model import load_campaign

        campaign = load_campaign(campaign_file)
    if source is None:
        if campaign is None:
            raise ValueError("make_app needs a source or a campaign")
        from runner.campaign.host_view import recorded_host

        if getattr(campaign, "hosts", ()) and recorded_host(campaign) is None:
            from console.fleet_source import FleetSource  # several hosts, from your side

            source = FleetSource(campaign)
        else:
            from console.source import RunnerSource

            source = RunnerSource(campaign.root)
    if keymap is None and use_user_keymap:
        keymap = load_keymap(known_ids=BINDING_IDS)
    return CampaignConsole(
        source,
        campaign=campaign,
        nvml=nvml,
        clock=clock,
        refresh_seconds=refresh_seconds,
        auto_tick=auto_tick,
        tz=tz,
        keymap=keymap,
        ssh=ssh,
        process_every=process_every,
    )
