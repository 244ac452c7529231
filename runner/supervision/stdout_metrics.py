"""The training process's stdout, for a run whose metrics come from it (`metrics_regex`,
`metrics_format`).

Apart from the supervisor's loop because it is one job with its own state: every byte is copied
to output.log, complete lines go through the variant's parser, and the records go to the judge.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable
from typing import BinaryIO

from runner.supervision.line_parsers import LineParser, empty_match_warning


class StdoutMetrics:
    """The non-blocking read end of the child's stdout pipe, registered in `sel` as "stdout"."""

    def __init__(
        self,
        fd: int,
        parser: LineParser,
        log: BinaryIO,
        sel: selectors.BaseSelector,
        log_line: Callable[[str], None],
        judge: Callable[[list[dict]], None],
    ) -> None:
        self.fd: int | None = fd
        self.parser = parser
        self.log = log
        self.sel = sel
        self.log_line = log_line
        self.judge = judge
        self.buf = b""
        self.lines = 0  # metric lines parsed from stdout by metrics_regex
        self.empty_warned = False

    def read(self) -> None:
        fd = self.fd
        if fd is None:
            return
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(fd)
            self.fd = None
            if self.buf:
                self._parse(self.buf + b"\n")
                self.buf = b""
            return
        self.log.write(data)
        buf = self.buf + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self.buf = buf[-1_000_000:]
            return
        self.buf = buf[cut + 1 :]
        self._parse(buf[: cut + 1])

    def _parse(self, block: bytes) -> None:
        parser = self.parser
        records, _ = parser.parse_block(block)
        self.lines += len(records)
        warning = (
            None if self.empty_warned else empty_match_warning(parser.matched_empty, self.lines, parser.format_name)
        )
        if warning:
            self.empty_warned = True  # said once: a regex that matches yet parses nothing follows nothing
            self.log_line(f"--- warning: {warning}")
        if records:
            now = time.time()
            for r in records:
                r.setdefault("t", now)
            self.judge(records)

    def drain(self, seconds: float) -> None:
        """What is left in the pipe after the child ended, for at most `seconds`."""
        deadline = time.monotonic() + seconds
        while self.fd is not None and time.monotonic() < deadline:
            if not any(k.data == "stdout" for k, _ in self.sel.select(0.05)):
                continue
            self.read()
