"""The console's asyncio client of the runner's socket (the CLI's is `runner.daemon.client`).

Kept apart so that a CLI command, one request and no event loop, never imports asyncio.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from runner.campaign.errors import RunnerUnavailable
from runner.campaign.statedir import StatePaths, paths_for
from runner.daemon import protocol
from runner.daemon.client import DEFAULT_TIMEOUT, RequestFailed, reply_result, unavailable


class AsyncClient:
    """The console's client: `await request(op, **args)`, `async for ev in subscribe()`.

    Requests share one connection, opened on first use and re-opened once if it was lost (a
    restarted runner is picked up without the caller noticing). `watch()` never ends: it yields
    the runner's events and `{"event": "runner", "data": {"up": bool, ...}}` when it goes or comes.
    """

    def __init__(self, target: object, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.paths = target if isinstance(target, StatePaths) else paths_for(target)
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        path = self.paths.socket
        if not Path(path).exists():
            raise unavailable(self.paths, f"no socket at {path}")
        try:
            return await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=protocol.MAX_REPLY_BYTES), self.timeout
            )
        except (ConnectionRefusedError, FileNotFoundError):
            raise unavailable(self.paths, "nothing answers on its socket") from None
        except PermissionError:
            raise RunnerUnavailable(f"no permission to reach the runner's socket {path}") from None
        except (TimeoutError, OSError) as exc:
            raise unavailable(self.paths, f"cannot connect: {exc}") from None

    async def close(self) -> None:
        w, self._reader, self._writer = self._writer, None, None
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except (OSError, ConnectionError):
                pass

    async def request(self, op: str, **args: Any) -> Any:
        async with self._lock:
            for attempt in (1, 2):
                if self._writer is None or self._reader is None:
                    self._reader, self._writer = await self._open()
                req_id = next(self._ids)
                try:
                    self._writer.write(protocol.encode({"id": req_id, "op": op, **args}))
                    await self._writer.drain()
                    while True:
                        line = await asyncio.wait_for(self._reader.readline(), self.timeout)
                        if not line:
                            raise ConnectionResetError("closed")
                        msg = protocol.decode(line, limit=protocol.MAX_REPLY_BYTES)
                        if msg.get("id") == req_id and "ok" in msg:
                            return reply_result(msg)
                except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
                    await self.close()
                    if attempt == 2:
                        raise unavailable(self.paths, f"connection lost: {exc}") from None
                except TimeoutError:
                    await self.close()
                    raise RequestFailed(f"the runner did not answer {op!r} within {self.timeout:g} s") from None
        raise AssertionError("unreachable")

    async def subscribe(self) -> AsyncIterator[dict]:
        """Events on a connection of their own, until the runner goes (then RunnerUnavailable)."""
        reader, writer = await self._open()
        try:
            writer.write(protocol.encode({"id": 0, "op": "subscribe"}))
            await writer.drain()
            while True:
                try:
                    line = await reader.readline()
                except (ConnectionError, OSError, ValueError) as exc:
                    raise unavailable(self.paths, f"connection lost: {exc}") from None
                if not line:
                    raise unavailable(self.paths, "it closed the connection")
                try:
                    msg = protocol.decode(line, limit=protocol.MAX_REPLY_BYTES)
                except protocol.ProtocolError:
                    continue
                if "event" in msg:
                    yield msg
                elif msg.get("ok") is False:
                    raise RequestFailed(str(msg.get("error")), code=msg.get("code"), hint=msg.get("hint"))
        finally:
            writer.close()

    async def watch(self, retry_seconds: float = 1.0) -> AsyncIterator[dict]:
        """Events for ever, reconnecting; runner comings and goings arrive as "runner" events."""
        was_up: bool | None = None
        while True:
            try:
                async for ev in self.subscribe():
                    if was_up is not True:
                        was_up = True
                        yield {"event": "runner", "data": {"up": True}}
                    yield ev
                raise unavailable(self.paths, "it closed the connection")
            except (RunnerUnavailable, RequestFailed) as exc:
                if was_up is not False:
                    was_up = False
                    yield {
                        "event": "runner",
                        "data": {"up": False, "error": str(exc), "reason": _reason(exc), "hint": exc.hint},
                    }
            await asyncio.sleep(retry_seconds)


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or str(exc)
