"""One client's connection to the runner: the peer's uid checked, request lines decoded, each op
answered (start, abort, resume, decide, ...). Kept apart from the loop and the socket's setup.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
import traceback
from pathlib import Path
from typing import Any

import msgspec

from runner import __version__
from runner.campaign.errors import CampaignError
from runner.campaign.host_view import load_as_host
from runner.campaign.objects import Campaign
from runner.campaign.statedir import StatePaths
from runner.closing import pilot
from runner.daemon import protocol
from runner.daemon.containment import log
from runner.daemon.launcher import RunManager
from runner.daemon.leaving import Leaving
from runner.daemon.manager_state import RequestError
from runner.daemon.runview import RunView
from runner.daemon.status import frozen_config
from runner.daemon.status_types import Delta, Snapshot
from runner.ledger import store as L
from runner.ledger.records import RunRecord
from runner.ledger.states import RunState

MAX_CLIENT_BUFFER = 8 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Peer credentials: only the runner's own user may talk to it


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


def peer_allowed(peer_uid: int | None, own_uid: int) -> bool:
    """Same uid only: not root, not another user, not an unknown peer."""
    return peer_uid is not None and peer_uid == own_uid


def read_tail(path: Path, lines: int = 50, max_bytes: int = 256 * 1024) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


class ClientRequests:
    """The runner's part that talks to clients; the base of runner.daemon.server.Daemon."""

    # set by the runner's loop (runner.daemon.server.Daemon)
    campaign: Campaign
    paths: StatePaths
    ledger: L.Ledger
    manager: RunManager
    leaving: Leaving
    view: RunView
    subscribers: dict[asyncio.StreamWriter, int]
    stop_event: asyncio.Event | None
    abort_on_stop: bool

    def snapshot(self) -> Snapshot:
        self.view.refresh()
        return self.view.snapshot()

    def status_since(self, since: Any, epoch: Any) -> Snapshot | Delta:
        """`status`: the complete snapshot; given the `seq` and `epoch` of one this runner sent,
        what changed since (a poller over SSH pays for what changed, not for every run). Anything
        else (no `since`, another runner's epoch, a `seq` it never reached) gets the snapshot."""
        self.view.refresh()
        view = self.view
        if type(since) is int and isinstance(epoch, str) and epoch == view.epoch and 0 <= since <= view.seq:
            delta = view.delta(since, always=True)
            assert delta is not None  # `always`
            return delta
        return view.snapshot()

    def _send(self, writer: asyncio.StreamWriter, msg: Any) -> None:
        """One protocol message (a struct of runner.daemon.protocol, or a plain dict)."""
        if writer.is_closing():
            self.subscribers.pop(writer, None)
            return
        if writer.transport.get_write_buffer_size() > MAX_CLIENT_BUFFER:
            log("dropping a subscriber that does not read")
            self.subscribers.pop(writer, None)
            writer.close()
            return
        writer.write(protocol.encode(msg))

    def request_stop(self, abort_runs: bool) -> None:
        self.abort_on_stop = self.abort_on_stop or abort_runs
        if self.stop_event is not None:
            self.stop_event.set()

    async def handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            _, uid, _ = peer_credentials(sock)
        except OSError:
            uid = None
        if not peer_allowed(uid, os.getuid()):
            log(f"refused a connection from uid {uid}")
            refusal = protocol.error(
                None, f"refused: uid {uid} is not this runner's user", code=protocol.ErrorCode.REFUSED
            )
            writer.write(protocol.encode(refusal))
            try:
                await writer.drain()
            finally:
                writer.close()
            return
        try:
            while True:
                try:
                    line = await reader.readline()
                except (asyncio.LimitOverrunError, ValueError):
                    self._send(
                        writer,
                        protocol.error(
                            None,
                            f"line longer than {protocol.MAX_LINE_BYTES} bytes",
                            code=protocol.ErrorCode.BAD_REQUEST,
                        ),
                    )
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                await self.handle_line(line, writer)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.subscribers.pop(writer, None)
            writer.close()

    async def handle_line(self, line: bytes, writer: asyncio.StreamWriter) -> None:
        req_id = None
        try:
            msg = protocol.decode(line)
            req_id = msg.get("id") if isinstance(msg.get("id"), (int, str)) else None
            req_id, op, args = protocol.check_request(msg)
        except protocol.ProtocolError as exc:
            self._send(writer, protocol.error(req_id, str(exc), code="bad_request"))
            return
        try:
            result = self.dispatch(op, args, writer)
        except RequestError as exc:
            self._send(writer, protocol.error(req_id, str(exc), code=exc.code))
            return
        except CampaignError as exc:
            self._send(writer, protocol.error(req_id, str(exc), code="bad_input"))
            return
        except Exception as exc:
            log(f"op {op} failed:\n" + traceback.format_exc())
            self._send(
                writer,
                protocol.error(
                    req_id,
                    f"internal error in {op}: {type(exc).__name__}: {exc}",
                    code=protocol.ErrorCode.INTERNAL,
                    hint=f"the runner's log says more: {self.paths.log}",
                ),
            )
            return
        self._send(writer, protocol.ok(req_id, result))
        if op == "subscribe":
            # one full state, then deltas from its seq (a reconnecting console starts over here)
            snap = self.snapshot()
            self._send(writer, protocol.event("status", snap))
            if writer in self.subscribers:
                self.subscribers[writer] = snap.seq

    def dispatch(self, op: str, args: dict, writer: asyncio.StreamWriter) -> Any:
        m = self.manager
        if op == "ping":
            return {"pong": True, "pid": os.getpid(), "version": __version__}
        if op == "status":
            return self.status_since(args.get("since"), args.get("epoch"))
        if op == "subscribe":
            self.subscribers[writer] = 0
            return {"subscribed": True}
        if op == "start":
            self._reload_campaign()
            out = m.enqueue(_text(args, "variant"), why="start")
            m.schedule()
            run = self.ledger.run(out["run"])
            held = m.hold.held and run is not None and run.state == RunState.QUEUED
            held = held and run is not None and run.variant not in m.hold.allowed and not run.attempts
            note = self._wrap_up_note(run) or (m.hold.reason if held else None)
            return {**out, **_state_reply(run), **({"note": note} if note else {})}
        if op == "abort":
            return m.abort(_text(args, "run"), args.get("reason") or None, str(args.get("by") or "user"))
        if op == "resume":
            out = m.resume(_text(args, "run"))
            m.schedule()
            run = self.ledger.run(out["run"])
            note = self._wrap_up_note(run)
            return {**out, **_state_reply(run), **({"note": note} if note else {})}
        if op == "checkpoint":
            return m.signal_checkpoint(_text(args, "run"))
        if op == "decide":
            return self._decide(args)
        if op == "run_detail":
            return self._run_detail(_text(args, "run"))
        if op == "retrieval_verified":
            return self.leaving.retrieval_verified(args)
        if op == "wrap_up":
            return self.leaving.wrap_up(args)
        if op == "down":
            asyncio.get_running_loop().call_soon(self.request_stop, bool(args.get("abort_runs")))
            return {"stopping": True, "active_runs": sorted(self.manager.active)}
        raise RequestError(f"unknown op {op!r}", code="bad_request")

    def _wrap_up_note(self, run: Any) -> str | None:
        """A run queued while the wrap-up holds every launch waits for good unless it is cancelled."""
        if not self.manager.wrapup_hold or run is None or run.state != RunState.QUEUED:
            return None
        return "held: the wrap-up launches nothing more; `campaign wrap-up --cancel` lets launches go on"

    def _reload_campaign(self) -> None:
        """`start` freezes the file as it is now: a fixed rule or command gives a new run id."""
        self.campaign = load_as_host(self.campaign.path)
        self.manager.campaign = self.campaign
        self.leaving.set_campaign(self.campaign)
        self.view.set_campaign(self.campaign)

    def _decide(self, args: dict) -> Any:
        """The pilot decision, from the console's dialog or `campaign decide` (`how` says which)."""
        variants = args.get("variants") or []
        if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
            raise RequestError("'variants' must be a list of variant names", code="bad_input")
        how = str(args.get("how") or pilot.DecidedHow.CONSOLE)
        if how not in (pilot.DecidedHow.CONSOLE, pilot.DecidedHow.SHELL):
            raise RequestError("'how' must be console or shell", code="bad_input")
        self._reload_campaign()
        not_yet = pilot.not_over_yet(self.campaign, self.ledger.conn)
        if not_yet is not None:
            raise RequestError(f"{not_yet}. Decide once it is over: nothing was recorded", code="bad_input")
        result = pilot.record_decision(
            self.ledger.conn,
            self.campaign,
            str(args.get("choice")),
            variants,
            args.get("note"),
            str(args.get("who") or "console"),
            how=pilot.DecidedHow(how),
        )
        self.manager.cut_queued(list(result.get("cut_runs") or []), "cut at the pilot decision")
        self.ledger.announce(
            {"t": time.time(), "run_id": None, "kind": "decision", "choice": result.get("choice")}
            | {"who": result.get("who"), "how": result.get("how"), "dropped": result.get("dropped")}
        )
        self.manager.schedule()
        return result

    def _run_detail(self, run_id: str) -> dict:
        run = self.ledger.run(run_id)
        if run is None:
            raise RequestError(f"no run {run_id!r} in this campaign", code="bad_input")
        self.view.touch(run_id)
        self.view.refresh()
        row = self.view.row(run_id)
        return protocol.sanitize(
            {
                "run": msgspec.to_builtins(row),
                "config": frozen_config(run.run_dir),
                "rules": msgspec.to_builtins(row.rules) if row is not None else [],
                "checkpoints": L.checkpoints(self.ledger.conn, run_id),
                "log_tail": read_tail(run.run_dir / "output.log"),
                "events": L.events(self.ledger.conn, run_id=run_id, limit=200),
            }
        )


def _state_reply(run: RunRecord | None) -> dict[str, Any]:
    """A run's state as recorded after a request (and a refusal's reason); nothing when it is gone."""
    if run is None:
        return {}
    return {"state": run.state, **({"reason": run.stop_reason} if run.state == RunState.REFUSED else {})}


def _text(args: dict, key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError(f"'{key}' must be a non-empty string", code="bad_input")
    return value
