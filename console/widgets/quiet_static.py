"""A Static that costs nothing on a tick where its words did not change.

`Static.update` repaints the widget and asks for a layout pass, and a layout pass re-renders the
whole screen: done by a header each second, it was most of an idle console's CPU. `put` repaints
only when the text differs from what is shown, and asks for a layout only when the number of lines
changed (the only way a one-line header or an auto-height panel can change size).
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class QuietStatic(Static):
    _shown: Text | None = None

    def put(self, text: Text) -> bool:
        """Show `text`; True when it differed from what was shown (and was repainted)."""
        old = self._shown
        if old is not None and old == text and old.no_wrap == text.no_wrap and old.overflow == text.overflow:
            return False
        self._shown = text
        self.update(text, layout=old is None or not self._same_height(old, text))
        return True

    def _same_height(self, old: Text, new: Text) -> bool:
        """Whether `new` certainly takes the lines `old` took: a fixed height, or unwrapped text
        with as many line breaks."""
        height = self.styles.height
        if height is not None and not height.is_auto:
            return True
        return bool(new.no_wrap and old.no_wrap) and old.plain.count("\n") == new.plain.count("\n")
