"""The top line: which bundle, how long it has left, and by when files must be off the host.

Its CSS class follows the expiry level (`-ok`, `-warning`, `-critical`, `-expired`), so the colour
changes with the level; the words are kept short enough for an 80-column terminal.
"""

from __future__ import annotations

import datetime as dt

from rich.text import Text

from console.expiry import LEVELS, Expiry
from console.fmt import fmt_iso_local, fmt_span
from console.widgets.quiet_static import QuietStatic


class BundleHeader(QuietStatic):
    DEFAULT_CSS = """
    BundleHeader { height: 1; padding: 0 1; background: $primary-darken-2; color: $text; text-wrap: nowrap; text-overflow: ellipsis; }
    BundleHeader.-warning { background: $warning-darken-2; }
    BundleHeader.-critical { background: $error-darken-1; text-style: bold; }
    BundleHeader.-expired { background: $error-darken-3; text-style: bold reverse; }
    """

    def show(self, snapshot: dict, expiry: Expiry, tz: dt.tzinfo | None = None) -> None:
        b = snapshot.get("bundle") or {}
        name = (snapshot.get("campaign") or {}).get("name") or "campaign"
        price = b.get("price_usd")
        gpus = b.get("gpus") or 1
        plan = f"{b.get('gpu', '?')}{' x' + str(gpus) if gpus and gpus > 1 else ''} {b.get('plan') or str(b.get('days', '?')) + 'd'}"
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(plan, style="bold")
        if price is not None:
            text.append(f" ${price:,.2f}")
        text.append(" │ ")
        if expiry.remaining_seconds is None:
            text.append("window unknown")
        elif expiry.level == "expired":
            text.append(f"EXPIRED {fmt_span(-expiry.remaining_seconds)} ago", style="bold")
        else:
            text.append("left ")
            text.append(fmt_span(expiry.remaining_seconds), style="bold")
        text.append(" │ retrieve by ")
        text.append(fmt_iso_local(b.get("retrieve_by"), tz, short=True), style="bold")
        if snapshot.get("retrieval"):
            text.append(" ✓ retrieved", style="bold")
        text.append(f" │ {name}")
        self.put(text)
        for level in LEVELS:
            self.set_class(level == expiry.level, f"-{level}")
