"""Writes the console's screenshots (SVG, 80x24 unless a shot says otherwise) from the demo
campaign at fixed moments: every screen and dialog a user can see, each listed in SHOTS
(tests/fixtures/shots.py) — the main screen in each expiry level, at 120 and at 60 columns, with a
filter, a sweep past 200 runs, a silent metrics regex, a pilot awaiting its decision, several hosts
and a runner that stopped answering; the run detail, plan, retrieval and report screens; the
start, abort, filter, pilot and wrap-up dialogs — and the closing report's Markdown rendered as a
page (report-markdown.svg).

    python screenshots/make_screenshots.py [OUT_DIR]      (default: this folder)

Deterministic: the demo is written at a fixed moment into a fixed folder, its runs are fixed data
(tests/fixtures/scene.py), the clock is fixed and NVML answers are recorded ones (an RTX 4090).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.shots import CLOSED_LEVELS, SHOTS, build_closing_scene, build_scene, report_markdown_svg, shoot  # noqa: E402


async def main(out: Path) -> None:
    folder, closing = build_scene(), build_closing_scene()
    out.mkdir(parents=True, exist_ok=True)
    for name, shot in SHOTS.items():
        await shoot(name, shot, closing if shot.level in CLOSED_LEVELS else folder, out)
        print(out / f"{name}.svg")
    (out / "report-markdown.svg").write_text(report_markdown_svg(closing), encoding="utf-8")
    print(out / "report-markdown.svg")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
