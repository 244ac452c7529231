"""Talking to a campaign's runner over `.campaign/runner.sock`: a blocking client for the CLI and an
asyncio client for the console.

Both raise `RunnerUnavailable` (with the command that fixes it) when no runner answers, a
`CampaignError` when the runner says the request was the user's mistake (an undeclared variant, an
unknown run: the CLI exits 2), and `RequestFailed` for any other refusal. Neither ever signals a
process: every action is a request the runner carries out.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from runner.campaign.errors import CampaignError, RunnerUnavailable
from runner.campaign.statedir import StatePaths, paths_for
from runner.daemon import protocol

DEFAULT_TIMEOUT = 15.0


class RequestFailed(Exception):
    """The runner answered, and refused (its words are the message; `code` and `hint` as sent)."""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint


def _unavailable(paths: StatePaths, why: str) -> RunnerUnavailable:
    return RunnerUnavailable(
        f"the runner is not running for {paths.root} ({why})", hint=f"start it with `campaign up {paths.root}`"
    )


def _result(reply: dict) -> Any:
    if reply.get("ok"):
        return reply.get("result")
    message = str(reply.get("error") or "the runner refused the request")
    code, hint = reply.get("code"), reply.get("hint")
    if code == protocol.ErrorCode.BAD_INPUT:
        raise CampaignError(message)
    raise RequestFailed(message, code=code, hint=hint)


class Client:
    """A blocking connection to the runner (one request at a time). Use as a context manager."""

    def __init__(self, target: object, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.paths = target if isinstance(target, StatePaths) else paths_for(target)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = b""
        self._ids = itertools.count(1)

    def connect(self) -> Client:
        if self._sock is not None:
            return self
        path = self.paths.socket
        if not path.exists():
            raise _unavailable(self.paths, f"no socket at {path}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            s.close()
            raise _unavailable(self.paths, "nothing answers on its socket") from None
        except PermissionError:
            s.close()
            raise RunnerUnavailable(
                f"no permission to reach the runner's socket {path}: it belongs to another user"
            ) from None
        except OSError as exc:
            s.close()
            raise _unavailable(self.paths, f"cannot connect: {exc.strerror or exc}") from None
        self._sock = s
        self._buf = b""
        return self

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> Client:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _readline(self) -> bytes:
        """One line; a long one (a full snapshot: megabytes) is gathered in a bytearray and only
        the newest chunk is searched for its end, so reading it costs its length, not its square."""
        assert self._sock is not None
        buf = bytearray(self._buf)
        start = 0
        while (end := buf.find(b"\n", start)) < 0:
            start = len(buf)
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                raise RequestFailed(f"the runner did not answer within {self.timeout:g} s") from None
            except OSError as exc:
                raise _unavailable(self.paths, f"connection lost: {exc}") from None
            if not chunk:
                self.close()
                raise _unavailable(self.paths, "it closed the connection")
            buf += chunk
        line, self._buf = bytes(buf[:end]), bytes(buf[end + 1 :])
        return line

    def _message(self) -> dict:
        return protocol.decode(self._readline(), limit=protocol.MAX_REPLY_BYTES)

    def send(self, message: dict) -> None:
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(protocol.encode(message))
        except OSError as exc:
            self.close()
            raise _unavailable(self.paths, f"connection lost: {exc}") from None

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its result (raises on an error reply)."""
        req_id = next(self._ids)
        self.send({"id": req_id, "op": op, **args})
        while True:
            msg = self._message()
            if msg.get("id") == req_id and "ok" in msg:
                return _result(msg)

    def subscribe(self) -> Iterator[dict]:
        """Events (`{"event": ..., "data": ...}`) until the runner goes away."""
        self.request("subscribe")
        while True:
            msg = self._message()
            if "event" in msg:
                yield msg


def request(target: object, op: str, *, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> Any:
    """One request on a fresh connection (what each CLI command does)."""
    with Client(target, timeout=timeout) as c:
        return c.request(op, **args)


def ping(target: object, *, timeout: float = 3.0) -> dict | None:
    """The runner's `{"pong", "pid", "version"}`, or None when none answers."""
    try:
        return request(target, "ping", timeout=timeout)
    except (RunnerUnavailable, RequestFailed, protocol.ProtocolError):
        return None


# ---------------------------------------------------------------------------------------------
# asyncio


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
            raise _unavailable(self.paths, f"no socket at {path}")
        try:
            return await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=protocol.MAX_REPLY_BYTES), self.timeout
            )
        except (ConnectionRefusedError, FileNotFoundError):
            raise _unavailable(self.paths, "nothing answers on its socket") from None
        except PermissionError:
            raise RunnerUnavailable(f"no permission to reach the runner's socket {path}") from None
        except (TimeoutError, OSError) as exc:
            raise _unavailable(self.paths, f"cannot connect: {exc}") from None

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
                            return _result(msg)
                except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
                    await self.close()
                    if attempt == 2:
                        raise _unavailable(self.paths, f"connection lost: {exc}") from None
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
                    raise _unavailable(self.paths, f"connection lost: {exc}") from None
                if not line:
                    raise _unavailable(self.paths, "it closed the connection")
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
                raise _unavailable(self.paths, "it closed the connection")
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
