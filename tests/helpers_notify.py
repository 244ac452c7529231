"""A loopback HTTP endpoint that records what Apprise's `json://` URLs post to it, and a port that
accepts connections but never answers (a dead endpoint that makes senders wait)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[float, dict]] = []
        self.lock = threading.Lock()

        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    data = json.loads(body)
                except ValueError:
                    data = {"raw": body.decode("utf-8", "replace")}
                with inbox.lock:
                    inbox.messages.append((time.time(), data))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook"

    def find(self, text: str) -> tuple[float, dict] | None:
        with self.lock:
            return next(((t, m) for t, m in self.messages if text in json.dumps(m)), None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SilentPort:
    """Accepts TCP connections into its backlog and never reads or answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/dead"

    def close(self) -> None:
        self.sock.close()
