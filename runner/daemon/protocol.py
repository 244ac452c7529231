"""The control socket's wire format: one JSON object a line, UTF-8 (docs/INTERNALS.md).

Requests carry `op` and an `id`; replies echo the `id` with `ok` and `result` or `error`; a
subscription streams `{"event": ...}` messages. JSON has no NaN or infinity, so non-finite floats
travel as the strings "nan", "inf", "-inf". Decoding never raises anything but `ProtocolError`, so
a malformed line costs the sender an error reply, never the runner a crash.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_LINE_BYTES = 4 * 1024 * 1024  # a status snapshot of many runs fits well inside this
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
    """One message as a line of bytes."""
    return dumps(obj).encode("utf-8") + b"\n"


def decode(line: bytes | str) -> dict:
    """One received line as a dict; raises ProtocolError for anything else."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError(f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("line is not UTF-8") from None
    line = line.strip()
    if not line:
        raise ProtocolError("empty line")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
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


def ok(req_id: Any, result: Any) -> dict:
    return {"id": req_id, "ok": True, "result": result}


def error(req_id: Any, message: str, *, code: str | None = None) -> dict:
    """An error reply; `code` "bad_input" marks the user's mistake (the CLI exits 2 on it)."""
    out = {"id": req_id, "ok": False, "error": message}
    if code:
        out["code"] = code
    return out


def event(kind: str, data: Any) -> dict:
    return {"event": kind, "data": data}
