"""Errors meant for users: they name the file, the line where one is known, and the field.

The CLI turns a `CampaignError` into exit code 2 with its message on stderr; anything else is a
failure (exit 1). Keeping one class lets every layer raise the same thing without knowing the CLI.
"""

from __future__ import annotations

from pathlib import Path


class CampaignError(Exception):
    """Bad input from the user: a campaign file, a command-line argument, a checkpoint path."""

    def __init__(
        self, message: str, *, file: str | Path | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        self.reason = message
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}{field}{self.reason}"


class RunnerUnavailable(Exception):
    """The runner is not running or its socket does not answer (exit 1, not bad input).

    `reason` says what is wrong and `hint` what fixes it, apart, so a screen can put the fix first;
    the message is both, "reason: hint"."""

    def __init__(self, reason: str, *, hint: str | None = None) -> None:
        self.reason = reason
        self.hint = hint
        super().__init__(f"{reason}: {hint}" if hint else reason)


class RunnerStartFailed(RunnerUnavailable):
    """`up` started a runner that died or gave up while starting (exit 2): the reason is what it
    wrote to runner.log on the way out (a file system it cannot use, a fatal signal)."""
