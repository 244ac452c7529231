"""The control socket's wire format: one JSON object a line, UTF-8 (docs/INTERNALS.md).

Requests carry `op` and an `id`; replies (`OkReply`, `ErrorReply`) echo the `id` with `ok` and
`result` or `error` (+ `code`, `hint`); a subscription streams `EventMessage`s. JSON has no NaN or
infinity, so non-finite floats travel as the strings "nan", "inf", "-inf". Decoding never raises
anything but `ProtocolError`, so a malformed line costs the sender an error reply, never the
runner a crash.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any

import msgspec

MAX_LINE_BYTES = 4 * 1024 * 1024  # a request; the runner refuses longer lines
MAX_REPLY_BYTES = 1024 * 1024 * 1024  # a reply: a full snapshot of 10,000 runs is about 15 MB
PROTOCOL_VERSION = 1

# op -> required argument names (others are optional); the daemon checks before dispatching
OPS: dict[str, tuple[str, ...]] = {
    "status": (),
    "subscribe": (),
    "start": ("variant",),
    "abort": ("run",),
    "resume": ("run",),
    "checkpoint": ("run",),
    "decide": ("choice",),
    "run_detail": ("run",),
    "down": (),
    "ping": (),
    "retrieval_verified": ("files", "bytes", "to"),
    "wrap_up": (),
}


class ProtocolError(ValueError):
    """A line that is not a request this protocol understands."""


class ErrorCode(StrEnum):
    """Why a request was refused; clients act on the code, never on the words."""

    BAD_REQUEST = "bad_request"  # not a request this protocol knows
    BAD_INPUT = "bad_input"  # the user's mistake (an undeclared variant, an unknown run): exit 2
    REFUSED = "refused"  # a peer of another uid
    INTERNAL = "internal"  # the runner failed; its log says why


class OkReply(msgspec.Struct):
    id: int | str | None
    ok: bool
    result: Any


class ErrorReply(msgspec.Struct, omit_defaults=True):
    id: int | str | None
    ok: bool
    error: str  # what went wrong, in words for people
    code: str | None = None  # an ErrorCode value
    hint: str | None = None  # what to do about it, when the runner knows


class EventMessage(msgspec.Struct):
    event: str  # "status" (a full snapshot), "delta" (what changed), "log" (a ledger event), "runner"
    data: Any


_encoder = msgspec.json.Encoder(enc_hook=str)


def _finite_or_text(x: float) -> float | str:
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def sanitize(obj: Any) -> Any:
    """A copy of `obj` where every non-finite float is the string "nan", "inf" or "-inf"."""
    t = type(obj)
    if t is float:
        return _finite_or_text(obj)
    if t is dict:
        return {k: sanitize(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [sanitize(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """JSON text without NaN tokens (strict JSON any client can parse)."""
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":"), default=str)
    except ValueError:
        return json.dumps(sanitize(obj), allow_nan=False, separators=(",", ":"), default=str)


def encode(obj: Any) -> bytes:
    """One message as a line of bytes. Structs are built finite-or-text (`ok`, `event` and the
    snapshot types see to it), so they go through msgspec as they are."""
    if isinstance(obj, msgspec.Struct):
        return _encoder.encode(obj) + b"\n"
    return dumps(obj).encode("utf-8") + b"\n"


def decode(line: bytes | str, *, limit: int = MAX_LINE_BYTES) -> dict:
    """One received line as a dict; raises ProtocolError for anything else."""
    if isinstance(line, bytes) and len(line) > limit:
        raise ProtocolError(f"line longer than {limit} bytes")
    # msgspec reads bytes as they are (a 10 MB full state is not copied into a str and stripped
    # first); surrounding whitespace is valid JSON
    if not line or line.isspace():
        raise ProtocolError("empty line")
    try:
        obj = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        if isinstance(line, bytes):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("line is not UTF-8") from None
        raise ProtocolError("line is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("a message must be a JSON object")
    return obj


def check_request(msg: dict) -> tuple[Any, str, dict]:
    """(id, op, args) of a request; raises ProtocolError naming what is wrong."""
    req_id = msg.get("id")
    if req_id is not None and not isinstance(req_id, (int, str)):
        raise ProtocolError("'id' must be a number or a string")
    op = msg.get("op")
    if not isinstance(op, str):
        raise ProtocolError("a request needs an 'op' string")
    if op not in OPS:
        raise ProtocolError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    args = {k: v for k, v in msg.items() if k not in ("id", "op")}
    missing = [a for a in OPS[op] if a not in args]
    if missing:
        raise ProtocolError(f"op {op!r} needs {', '.join(missing)}")
    return req_id, op, args


def _finite(data: Any) -> Any:
    return data if isinstance(data, msgspec.Struct) else sanitize(data)


def ok(req_id: Any, result: Any) -> OkReply:
    return OkReply(id=req_id, ok=True, result=_finite(result))


def error(req_id: Any, message: str, *, code: ErrorCode | str | None = None, hint: str | None = None) -> ErrorReply:
    """An error reply; code "bad_input" marks the user's mistake (the CLI exits 2 on it)."""
    return ErrorReply(id=req_id, ok=False, error=message, code=str(code) if code else None, hint=hint)


def event(kind: str, data: Any) -> EventMessage:
    return EventMessage(event=kind, data=_finite(data))
