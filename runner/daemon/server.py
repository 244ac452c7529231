"""The runner: one background process per campaign folder (`python -m runner.daemon.server FILE`).

It owns the queue, the GPU slots, the ledger (sole writer) and the control socket, in one asyncio
event loop: a tick every quarter second brings the ledger up to date with the run folders and
launches what the queue and the slots allow; the socket answers NDJSON requests (runner.daemon.protocol)
from the same uid only. It can be killed at any moment: on start it rebuilds from the ledger and
the run folders and takes live supervisors back. `--detach` (what `campaign up` passes) forks once
so the runner is nobody's child; stdio always goes to `.campaign/runner.log`.
"""

from __future__ import annotations

import asyncio
import faulthandler
import fcntl
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from campaign_train.atomic import write_json_atomic, write_text_atomic
from runner import __version__
from runner.campaign.errors import CampaignError
from runner.campaign.faultpoints import START_POINT, fault_point
from runner.campaign.host_view import load_as_host
from runner.campaign.objects import Campaign
from runner.campaign.statedir import StatePaths, paths_for
from runner.closing import pilot
from runner.daemon import protocol
from runner.daemon.client_requests import ClientRequests
from runner.daemon.containment import CANNOT_START, log
from runner.daemon.launcher import RunManager
from runner.daemon.leaving import Leaving
from runner.daemon.nvml import Nvml
from runner.daemon.runview import RunView
from runner.daemon.slots import plan_slots
from runner.daemon.storage import LOCAL_DISK, Journal, Storage, probe
from runner.ledger import store as L
from runner.supervision import cgroups

TICK_ACTIVE, TICK_IDLE = 0.25, 0.5
STATUS_PUSH_SECONDS = 1.0
# ledger events after which the output folder (manifest, RELOAD.md, artifacts) is brought up to date
OUTPUT_EVENTS = frozenset(
    {"finished", "failed", "stopped", "aborted", "refused", "lost", "ended_while_down", "decision"}
)


class Daemon(ClientRequests):
    """The runner's loop: ticks the run manager, pushes status to subscribers, serves the socket."""

    def __init__(self, campaign: Campaign, paths: StatePaths, storage: Storage | None = None) -> None:
        self.campaign = campaign
        self.paths = paths
        self.storage = storage or Storage(paths.dir)  # what the folder's file system can hold
        self.ledger = L.Ledger(paths.ledger, journal=str(self.storage.journal or Journal.WAL))
        self.nvml = Nvml.shared()
        self.slots = plan_slots(campaign, gpu_count=self.nvml.device_count(), nvml_error=self.nvml.error)
        # what finds a run's processes when its supervisor is lost, and what can escape (status says)
        self.tracking = cgroups.detect(campaign.root)
        self.manager = RunManager(campaign, self.ledger, self.slots, tracking=self.tracking)
        self.started_at = time.time()
        # each subscriber -> the view's seq it has been sent up to (it gets only what changed since)
        self.subscribers: dict[asyncio.StreamWriter, int] = {}
        self.stop_event: asyncio.Event | None = None
        self.output_stale = False  # the output folder lags a run's end
        self.output_task: asyncio.Task | None = None
        self.abort_on_stop = False
        self._bound: Path | None = None  # where the socket was bound
        self._last_push = 0.0
        self.leaving = Leaving(campaign, self.ledger, self.manager, log)  # notify, wrap-up, retrieval
        self.view = RunView(campaign, self.ledger.conn, nvml=self.nvml, runner=self.runner_info, slots=self.slots_info)
        self.ledger.run_listeners.append(self.view.touch)
        self.ledger.listeners.append(self._on_ledger_event)

    # -- snapshot and events -------------------------------------------------------------------
    def runner_info(self) -> dict:
        return {
            "pid": os.getpid(),
            "started_at": self.started_at,
            "version": __version__,
            "slots_note": self.slots.note,
            **self.leaving.info(),
            "process_tracking": self.tracking.describe(),
            "storage": self.storage.describe(),
        }

    def slots_info(self) -> dict:
        return {"total": self.slots.total, "busy": len(self.manager.busy), "note": self.slots.note}

    def _on_ledger_event(self, ev: dict) -> None:
        self.view.on_event(ev)
        if ev.get("kind") in OUTPUT_EVENTS:
            self.output_stale = True
        if self.subscribers:
            msg = protocol.event("log", ev)
            for w in list(self.subscribers):
                self._send(w, msg)

    def _push_status(self) -> None:
        """Each subscriber gets what changed since what it was last sent, and nothing when
        nothing changed. Subscribers are nearly always at the same seq: one delta serves them."""
        self.view.refresh()
        sent: dict[int, protocol.EventMessage | None] = {}
        for w, seq in list(self.subscribers.items()):
            if seq not in sent:
                delta = self.view.delta(seq)
                sent[seq] = protocol.event("delta", delta) if delta is not None else None
            msg = sent[seq]
            if msg is not None:
                self._send(w, msg)
                if w in self.subscribers:
                    self.subscribers[w] = self.view.seq
        self._last_push = time.monotonic()

    # -- the loop ------------------------------------------------------------------------------
    async def ticker(self) -> None:
        """The work loop. Nothing raised inside one pass may end it (containment: a failure is the
        run's, recorded on it by RunManager.tick; what escapes that is logged and retried)."""
        assert self.stop_event is not None
        while not self.stop_event.is_set():
            self._one_pass()
            # a plain sleep (no task and timeout per tick, as wait_for costs): a stop is seen when
            # it wakes, before any other pass, and `run` cancels this loop anyway
            await asyncio.sleep(TICK_ACTIVE if self.manager.active else TICK_IDLE)

    def _one_pass(self) -> None:
        self.leaving.before_tick()  # the wrap-up may start (holding launches) or end
        try:
            self.manager.tick()
        except Exception:
            log("tick failed:\n" + traceback.format_exc())
        if self.subscribers:
            if time.monotonic() - self._last_push >= STATUS_PUSH_SECONDS:
                try:
                    self._push_status()
                except Exception:
                    log("status push failed:\n" + traceback.format_exc())
        self.leaving.after_tick()  # notifications: expiry levels, delivery outcomes
        try:
            self._maybe_refresh_output()
        except Exception:
            log("output folder refresh could not start:\n" + traceback.format_exc())

    def _maybe_refresh_output(self) -> None:
        """Keep the output folder current as runs end: one refresh at a time, off the loop.

        Verification reloads artifacts in a child process and can take seconds, so it runs in a
        worker thread; events that arrive meanwhile mark it stale again for one more pass."""
        if not self.output_stale or (self.output_task is not None and not self.output_task.done()):
            return
        self.output_stale = False
        from runner.closing.manifest import refresh_output

        async def refresh() -> None:
            try:
                await asyncio.to_thread(refresh_output, self.campaign)
            except Exception:
                log("output folder refresh failed:\n" + traceback.format_exc())

        self.output_task = asyncio.get_running_loop().create_task(refresh())

    async def run(self) -> int:
        self.stop_event = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, False)
        self.ledger.event(
            "runner_start", pid=os.getpid(), version=__version__, slots=self.slots.total, slots_note=self.slots.note
        )
        log(f"started for {self.campaign.root}: {self.slots.note}")
        log(f"process tracking: {self.tracking.describe()}")
        self._freeze_plan()
        result = self.manager.rebuild()
        if result["adopted"] or result["ended"]:
            log(f"re-adopted {result['adopted']}; ended while down: {result['ended']}")
        if result.get("cgroups_swept"):
            log(f"cgroups a previous runner left, emptied and removed: {result['cgroups_swept']}")
        queued = self.manager.queue_initial()
        if queued:
            log(f"queued from the plan: {queued}")
        server = await self._listen()
        ticker = asyncio.create_task(self.ticker())
        await self.stop_event.wait()
        server.close()
        await self._stop_runs_if_asked()
        ticker.cancel()
        try:
            await ticker
        except asyncio.CancelledError:
            pass
        self.ledger.event(
            "runner_stop", pid=os.getpid(), abort_runs=self.abort_on_stop, runs_left=sorted(self.manager.active)
        )
        self.leaving.stop()
        for w in list(self.subscribers):
            w.close()
        self._unlink_socket()
        self.tracking.remove_root()  # only when no run is left in it
        self.ledger.close()
        log("stopped" + (f"; runs going on: {sorted(self.manager.active)}" if self.manager.active else ""))
        return 0

    async def _listen(self) -> asyncio.AbstractServer:
        """The control socket, where a socket can live: `.campaign/runner.sock`, or a short path
        elsewhere (runner.campaign.statedir.fallback_socket) when the folder's path is too long for
        AF_UNIX or its file system refuses sockets (sshfs and other FUSE mounts answer ENOSYS or
        EPERM); then `.campaign/runner.sock.where` names it for the clients."""
        p = self.paths
        self._unlink_socket()  # we hold the lock: any socket file is stale
        first_error: OSError | None = None
        if p.default_socket_fits():
            try:
                return await self._bind(p.default_socket)
            except OSError as exc:
                first_error = exc
                log(f"cannot create the socket {p.default_socket} ({exc.strerror or exc}): placing it elsewhere")
        where = p.fallback_socket()
        server = await self._bind(where)
        write_text_atomic(p.socket_pointer, str(where) + "\n", mode=0o600)
        self._bound = where
        log(
            f"socket at {where} (named in {p.socket_pointer}): "
            + (
                f"{first_error.strerror or first_error} in the campaign folder"
                if first_error
                else "the folder's path is too long for a Unix socket"
            )
        )
        return server

    async def _bind(self, path: Path) -> asyncio.AbstractServer:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(self.handle_client, path=str(path), limit=protocol.MAX_LINE_BYTES)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._bound = path
        return server

    def _unlink_socket(self) -> None:
        for path in (self._bound, self.paths.socket, self.paths.socket_pointer):
            if path is None:
                continue
            try:
                os.unlink(path)
            except (FileNotFoundError, IsADirectoryError, PermissionError):
                pass

    def _freeze_plan(self) -> None:
        try:
            pilot.ensure_frozen_plan(self.campaign, self.ledger.conn)
        except Exception:
            log("freezing the plan failed:\n" + traceback.format_exc())

    async def _stop_runs_if_asked(self) -> None:
        if not self.abort_on_stop:
            return
        self.manager.abort_all("the runner was stopped with --abort-runs", "down")
        deadline = time.monotonic() + self.manager.grace + 20
        while self.manager.active and time.monotonic() < deadline:
            self.manager.tick()
            await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# Entry point


def _redirect_stdio(paths: StatePaths) -> None:
    fd = os.open(paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    detach = "--detach" in args
    args = [a for a in args if a != "--detach"]
    if len(args) != 1:
        print("usage: python -m runner.daemon.server CAMPAIGN_FILE [--detach]", file=sys.stderr)
        return 2
    try:
        campaign = load_as_host(args[0])
    except CampaignError as exc:
        print(f"runner: {exc}", file=sys.stderr)
        return 2
    paths = paths_for(campaign)
    paths.ensure()
    _redirect_stdio(paths)
    # a death by signal (SIGBUS from a file system's memory map, SIGSEGV) still leaves its
    # traceback in runner.log, which `up` then reports
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if detach:
        if os.fork() > 0:
            os._exit(0)  # the launcher returns; the runner is nobody's child
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log(f"starting for {paths.root}")
    try:
        lock_fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"another runner already holds {paths.lock}: not starting a second one")
        return 0
    except OSError as exc:
        log(f"{CANNOT_START}{paths.lock} cannot be locked ({exc.strerror or exc}) on this file system; {LOCAL_DISK}")
        return 2
    storage = probe(paths.dir)
    for note in storage.notes:
        log(f"storage: {note}")
    if storage.refusal:
        log(CANNOT_START + storage.refusal)
        os.close(lock_fd)
        return 2
    fault_point(START_POINT)
    import psutil

    me = psutil.Process()
    write_json_atomic(
        paths.pid,
        {
            "pid": os.getpid(),
            "create_time": me.create_time(),
            "cmdline": me.cmdline(),
            "root": str(paths.root),
            "started_at": time.time(),
            "version": __version__,
        },
        mode=0o600,
    )
    try:
        return asyncio.run(Daemon(campaign, paths, storage).run())
    except Exception:
        log("crashed:\n" + traceback.format_exc())
        return 1
    finally:
        try:
            os.unlink(paths.pid)
        except FileNotFoundError:
            pass
        os.close(lock_fd)


if __name__ == "__main__":
    sys.exit(main())
