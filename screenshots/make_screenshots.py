"""Writes the console's screenshots (SVG, 80x24) from the demo campaign at fixed moments:
the main screen in each expiry level (and once at 120 columns), the run detail, the plan, the
retrieval screen, the report screen on the demo at its close (screenshots/closing_scene.py), and
that report's Markdown rendered as a page (report-markdown.svg).

    python screenshots/make_screenshots.py [OUT_DIR]      (default: this folder)

Deterministic: the demo is written at a fixed moment into a fixed folder, its runs are fixed data
(screenshots/scene.py), the clock is fixed and NVML answers are recorded ones (an RTX 4090).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from helpers_console_nvml import RTX4090, RecordedNvml  # noqa: E402

from runner.daemon.nvml import Nvml  # noqa: E402
from screenshots.closing_scene import write_closing_scene  # noqa: E402
from screenshots.scene import PIDS, moments, scene_app, write_scene  # noqa: E402

SCENE_DIR = Path("/tmp/campaign-console-screens/campaign-demo")  # fixed: it shows in the paths
CLOSING_DIR = Path("/tmp/campaign-console-screens/campaign-done")  # same length: same wrapping
SIZE = (80, 24)

# name -> (expiry level, keys pressed after the first tick[, terminal size when not 80x24])
SHOTS = {
    "main-ok": ("ok", ["down"]),
    "main-warning": ("warning", ["down"]),
    "main-critical": ("critical", ["down"]),
    "main-expired": ("expired", ["down"]),
    "main-wide": ("ok", ["down"], (120, 30)),
    "run-detail": ("ok", ["down", "down", "d"]),
    "plan": ("ok", ["p"]),
    "retrieval": ("warning", ["f"]),
    "main-retrieved": ("retrieved", ["down"]),
    "retrieval-verified": ("retrieved", ["f"]),
    "main-wrapup": ("wrapup", ["down"]),
    "wrapup-dialog": ("wrapup", ["w"]),
    "report": ("closed", ["R"]),  # drawn on the closing scene
}
CLOSED_LEVELS = ("closed",)


def recorded_nvml() -> Nvml:
    return Nvml(backend=RecordedNvml(devices=[RTX4090], process_pids={0: list(PIDS.values())}))


async def shoot(
    name: str, level: str, keys: list[str], folder: Path, out: Path | None, size: tuple[int, int] = SIZE
) -> str:
    """Draw one screen; returns its plain-text rendering and writes the SVG into `out`."""
    from console.screen_text import screen_text

    app = scene_app(folder, level, recorded_nvml())
    async with app.run_test(size=size) as pilot:
        await app.tick()
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = screen_text(app)
        if out is not None:
            svg = app.export_screenshot(title=f"campaign console — {name}")
            (out / f"{name}.svg").write_text(svg, encoding="utf-8")
    return text


def build_scene(folder: Path = SCENE_DIR) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    write_scene(folder)
    return folder


def build_closing_scene(folder: Path = CLOSING_DIR) -> Path:
    write_closing_scene(folder)
    return folder


def report_markdown_svg(folder: Path) -> str:
    """The closing scene's report Markdown rendered as a page (Rich, recorded, exported as SVG)."""
    import io

    from rich.console import Console
    from rich.markdown import Markdown

    from console.screens.report_screen import build_markdown
    from runner.campaign.model import load_campaign

    markdown = build_markdown(load_campaign(folder / "campaign.toml"), moments(folder)["closed"])
    page = Console(record=True, width=96, file=io.StringIO(), color_system="truecolor", force_terminal=True)
    page.print(Markdown(markdown, hyperlinks=False))
    return page.export_svg(title="campaign report --markdown")


async def main(out: Path) -> None:
    folder, closing = build_scene(), build_closing_scene()
    out.mkdir(parents=True, exist_ok=True)
    for name, (level, keys, *size) in SHOTS.items():
        await shoot(name, level, keys, closing if level in CLOSED_LEVELS else folder, out, *size)
        print(out / f"{name}.svg")
    (out / "report-markdown.svg").write_text(report_markdown_svg(closing), encoding="utf-8")
    print(out / "report-markdown.svg")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
