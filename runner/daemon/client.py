"""Talking to a campaign's runner over `.campaign/runner.sock`: the blocking client of the CLI (the
console's asyncio client, `runner.daemon.async_client`, shares its errors and replies).

Both raise `RunnerUnavailable` (with the command that fixes it) when no runner answers, a
`CampaignError` when the runner says the request was the user's mistake (an undeclared variant, an
unknown run: the CLI exits 2), and `RequestFailed` for any other refusal. Neither ever signals a
process: every action is a request the runner carries out.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
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


def unavailable(paths: StatePaths, why: str) -> RunnerUnavailable:
    return RunnerUnavailable(
        f"the runner is not running for {paths.root} ({why})", hint=f"start it with `campaign up {paths.root}`"
    )


def reply_result(reply: dict) -> Any:
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
            raise unavailable(self.paths, f"no socket at {path}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            s.close()
            raise unavailable(self.paths, "nothing answers on its socket") from None
        except PermissionError:
            s.close()
            raise RunnerUnavailable(
                f"no permission to reach the runner's socket {path}: it belongs to another user"
            ) from None
        except OSError as exc:
            s.close()
            raise unavailable(self.paths, f"cannot connect: {exc.strerror or exc}") from None
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
                raise unavailable(self.paths, f"connection lost: {exc}") from None
            if not chunk:
                self.close()
                raise unavailable(self.paths, "it closed the connection")
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
            raise unavailable(self.paths, f"connection lost: {exc}") from None

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its result (raises on an error reply)."""
        req_id = next(self._ids)
        self.send({"id": req_id, "op": op, **args})
        while True:
            msg = self._message()
            if msg.get("id") == req_id and "ok" in msg:
                return reply_result(msg)

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
