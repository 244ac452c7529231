"""The runner's part in leaving the host: notifications, the wrap-up, the verified retrieval.

One object the runner's loop holds (`Leaving`): it owns the notifier, the alerts and the wrap-up,
advances them each tick, answers the `wrap_up` and `retrieval_verified` requests, and adds their
state to the snapshot's `runner` part. The server only calls it.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from typing import Any

from runner.campaign.objects import Campaign
from runner.daemon.alerts import Alerts
from runner.daemon.launcher import RunManager
from runner.daemon.manager_state import RequestError
from runner.daemon.notify import Notifier
from runner.daemon.wrapup import WrapUp
from runner.ledger import store as L


class Leaving:
    def __init__(self, campaign: Campaign, ledger: L.Ledger, manager: RunManager, log: Callable[[str], None]) -> None:
        self.campaign = campaign
        self.ledger = ledger
        self.manager = manager
        self.log = log
        self.notifier = Notifier(campaign.notify)
        self.wrapup = WrapUp(campaign, ledger)
        self.alerts = Alerts(campaign, ledger, self.notifier, wrapping_up=lambda: self.wrapup.holding)
        ledger.listeners.append(self.alerts.on_event)
        self.wrapup_task: asyncio.Task | None = None

    def info(self) -> dict[str, Any]:
        """For the snapshot's `runner` part."""
        return {"notify": self.notifier.state(), "wrap_up": self.wrapup.to_json()}

    def set_campaign(self, campaign: Campaign) -> None:
        """The file was read again (`start`): a changed [notify] or wrap_up counts from now on."""
        self.campaign = self.alerts.campaign = self.wrapup.campaign = campaign
        self.notifier.config = campaign.notify
        if not self.wrapup.holding:
            self.wrapup.reload()

    # -- the loop ---------------------------------------------------------------------------------
    def before_tick(self) -> None:
        """Before the manager's tick: the wrap-up may start (and hold launches) or end."""
        try:
            if self.wrapup.tick(self.manager):
                self._write_output()
        except Exception:
            self.log("wrap-up failed:\n" + traceback.format_exc())
        self.manager.wrapup_hold = self.wrapup.holding

    def after_tick(self) -> None:
        try:
            self.alerts.tick()
        except Exception:
            self.log("notifications failed:\n" + traceback.format_exc())

    def stop(self) -> None:
        self.notifier.stop()

    def _write_output(self) -> None:
        """Every run of the wrap-up stopped: verify, write the manifest and RELOAD.md, then say so."""
        if self.wrapup_task is not None and not self.wrapup_task.done():
            return
        from runner.closing.manifest import refresh_output

        async def write() -> None:
            try:
                verification = await asyncio.to_thread(refresh_output, self.campaign)
                self.wrapup.finished(verification.ok, str(self.campaign.output_path / "manifest.toml"))
            except Exception as exc:
                self.log("wrap-up output failed:\n" + traceback.format_exc())
                self.wrapup.finished(False, None, f"writing the output failed: {exc}")

        self.wrapup_task = asyncio.get_running_loop().create_task(write())

    # -- requests ---------------------------------------------------------------------------------
    def wrap_up(self, args: dict) -> dict:
        """Show, move (`at`: epoch seconds) or cancel (`cancel`: true) the wrap-up."""
        who = str(args.get("who") or "user")
        try:
            if args.get("cancel"):
                out = self.wrapup.cancel(who)
            elif args.get("at") is not None:
                at = args["at"]
                if not isinstance(at, (int, float)) or isinstance(at, bool):
                    raise ValueError("'at' must be epoch seconds")
                out = self.wrapup.move(float(at), who)
            else:
                out = self.wrapup.to_json()
        except ValueError as exc:
            raise RequestError(str(exc), code="bad_input") from None
        self.manager.wrapup_hold = self.wrapup.holding
        return out

    def retrieval_verified(self, args: dict) -> dict:
        """`campaign pull` checked every file on the user's machine: kept in the ledger for good."""
        files, size, to = args.get("files"), args.get("bytes"), args.get("to")
        if not isinstance(files, int) or not isinstance(size, int) or files < 0 or size < 0:
            raise RequestError("'files' and 'bytes' must be whole numbers", code="bad_input")
        if not isinstance(to, str) or not to:
            raise RequestError("'to' must name the machine the files went to", code="bad_input")
        record: dict[str, Any] = {"files": files, "bytes": size, "to": to, "dest": str(args.get("dest") or "")}
        self.ledger.event("retrieval_verified", **record)
        return {"recorded": True, "at": time.time(), **record}
