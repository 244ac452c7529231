"""Where each key of a TOML file sits, so errors found after parsing can still name a line.

`tomllib` reports lines only for syntax errors; a wrong type or an unknown variant is found later,
on plain dicts. This scans the text once for table headers and `key =` lines. It is deliberately
simple (one key a line, the layout `campaign init` writes); when it cannot tell, it returns None and
the error names the field alone.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]+"|'[^']+'|[A-Za-z0-9_\-]+)\s*=""")


class KeyLines:
    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, int | None, str | None], int] = {}
        counts: dict[str, int] = {}
        table, index = "file", None
        in_multiline = False
        for n, line in enumerate(text.splitlines(), start=1):
            if line.count('"""') % 2 or line.count("'''") % 2:
                in_multiline = not in_multiline
                if not in_multiline:
                    continue
            elif in_multiline:
                continue
            h = _HEADER.match(line)
            if h and not _KEY.match(line):
                name = h.group(2).strip().strip("\"'")
                if "." in name:  # a sub-table: keep its keys under the parent entry
                    continue
                if h.group(1) == "[[":
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                else:
                    index = None
                table = name
                self._lines.setdefault((table, index, None), n)
                continue
            k = _KEY.match(line)
            if k:
                self._lines.setdefault((table, index, k.group(1).strip("\"'")), n)

    def line(self, table: str, index: int | None = None, key: str | None = None) -> int | None:
        """The line of `key` in the `index`-th `[[table]]` (or `[table]`), else of its header.
        For table "file" (the top level), a key may also be a table's own header."""
        found = self._lines.get((table, index, key)) or self._lines.get((table, index, None))
        if found is None and table == "file" and key:
            found = self._lines.get((key, None, None)) or self._lines.get((key, 0, None))
        return found
