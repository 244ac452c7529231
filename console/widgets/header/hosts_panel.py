"""One line per host of a campaign over several hosts: its bundle, GPUs, countdown and level,
its slots, or UNREACHABLE with since when. Hidden for a campaign on one host."""

from __future__ import annotations

import time

from rich.text import Text

from console.fmt import fmt_span
from console.widgets.quiet_static import QuietStatic

LEVEL_STYLE = {"ok": "green", "warning": "bold yellow", "critical": "bold red", "expired": "bold reverse red"}


def host_line(h: dict, now: float) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{h.get('host', '?'):<8}", style="bold")
    if not h.get("reachable", True):
        since = h.get("unreachable_since")
        stamp = time.strftime("%H:%M:%S", time.gmtime(since)) if since else "?"
        ago = f" ({fmt_span(max(0.0, now - since))} ago)" if since else ""
        line.append(f"UNREACHABLE since {stamp} UTC{ago}", style="bold red")
        line.append("  its runner goes on; starts sent to it are refused")
        return line
    b = h.get("bundle") or {}
    if not b:
        line.append(h.get("error") or "no answer from its runner", style="yellow")
        return line
    gpus = b.get("gpus") or 1
    line.append(f"{b.get('gpu', '?')} x{gpus} {b.get('plan', '')}  ")
    level = b.get("warning") or "ok"
    remaining = b.get("remaining_seconds")
    if remaining is not None and remaining <= 0:
        line.append(f"EXPIRED {fmt_span(-remaining)} ago", style=LEVEL_STYLE["expired"])
    elif remaining is not None:
        line.append(f"left {fmt_span(remaining)}", style=LEVEL_STYLE.get(level, ""))
    line.append(f" [{level}]", style=LEVEL_STYLE.get(level, ""))
    slots = h.get("slots") or {}
    if slots.get("total") is not None:
        line.append(f"  slots {slots.get('busy', 0)}/{slots['total']}")
    if h.get("runner") is None:
        line.append(f"  {h.get('error') or 'runner not running'}", style="yellow")
    return line


class HostsPanel(QuietStatic):
    DEFAULT_CSS = """
    HostsPanel { height: auto; max-height: 8; padding: 0 1; display: none; }
    HostsPanel.-shown { display: block; }
    """

    def show(self, hosts: list[dict] | None, now: float) -> None:
        self.set_class(bool(hosts), "-shown")
        if not hosts:
            return
        text = Text()
        for i, h in enumerate(hosts):
            if i:
                text.append("\n")
            text.append_text(host_line(h, now))
        self.put(text)
