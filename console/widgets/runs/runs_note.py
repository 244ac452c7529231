"""One line under the runs table, shown only when some runs are not listed (thousands of ended
runs, or a filter): how many, and the key that filters."""

from __future__ import annotations

from rich.text import Text

from console.widgets.quiet_static import QuietStatic


class RunsNote(QuietStatic):
    DEFAULT_CSS = """
    RunsNote { height: 1; padding: 0 1; display: none; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    RunsNote.-shown { display: block; }
    """

    def say(self, note: str | None) -> None:
        self.set_class(note is not None, "-shown")
        if note is not None:
            self.put(Text(note, no_wrap=True, overflow="ellipsis"))
