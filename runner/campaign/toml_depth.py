"""How deep a TOML text nests arrays and inline tables, found before tomllib reads it: its
recursive parser raises RecursionError (a traceback, not a refusal) on 5,000 nested `[`."""

from __future__ import annotations

import re


def too_deep(text: str, limit: int) -> tuple[int, str | None] | None:
    """(line, key) where `[`/`{` nesting first passes limit outside strings; None if never.

    A cheap scan before tomllib, whose recursive parser raises RecursionError on 5,000 `[`."""
    if text.count("[") + text.count("{") <= limit:
        return None
    depth, quote, line, key_line = 0, "", 1, ""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            if depth == 0:
                key_line = ""
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif ch in "[{":
            # a table header `[x]` / `[[x]]` at the start of a line is not nesting
            if depth == 0 and text[text.rfind("\n", 0, i) + 1 : i].strip() == "":
                depth = 0
            else:
                depth += 1
                if depth > limit:
                    m = re.match(r"\s*([A-Za-z0-9_.\"'-]+)\s*=", key_line)
                    return line, (m.group(1).strip("\"'") if m else None)
        elif ch in "]}":
            depth = max(0, depth - 1)
        if depth == 0 and ch != "\n":
            key_line += ch
        i += 1
    return None
