"""The screen as plain text, one line per terminal row: what tests compare and what a person reads
in a diff (an SVG says the same with colours, but is unreadable in review)."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip).rstrip() for strip in strips)
