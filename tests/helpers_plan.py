"""Campaign files for the planning tests, written as real files in a temporary folder."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import tomli_w

START = dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC)


def variant(name: str, hours: float, category: str = "essential", **extra) -> dict:
    return {
        "name": name,
        "category": category,
        "command": ["python", "train.py", "--name", name],
        "hours": hours,
        **extra,
    }


def write_campaign(
    folder: Path,
    *,
    phases: list[dict],
    variants: list[dict],
    bundle: dict | None = None,
    rules: list[dict] | None = None,
    spend: list[dict] | None = None,
    decision: dict | None = None,
) -> Path:
    """A campaign.toml in `folder` (created), from plain dicts, one key a line."""
    data: dict = {
        "campaign": {"name": "t", "question": "does it?"},
        "bundle": {
            "provider": "IteraGPU",
            "gpu": "RTX 4090",
            "days": 3,
            "started_at": START,
            "retrieval_hours": 2,
            **(bundle or {}),
        },
    }
    if decision:
        data["decision"] = decision
    data["phase"] = phases
    data["variant"] = variants
    if rules:
        data["rule"] = rules
    if spend:
        data["spend"] = spend
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def brief_campaign(folder: Path, extra_variants: bool = False) -> Path:
    """The brief's worked example: 48 h from setup to retrieval in a 3-day window; with
    `extra_variants`, three more 10 h variants make it 78 h, 6 h over."""
    vs = [variant("control", 10), variant("rank16", 10), variant("rank64", 10, "exploratory")]
    if extra_variants:
        vs += [variant("lr2", 10, "useful"), variant("len512", 10, "useful"), variant("fp8", 10, "exploratory")]
    return write_campaign(
        folder,
        variants=vs,
        phases=[
            {"name": "preparation", "hours": 4, "uses": "human", "before_window": True},
            {"name": "setup and data validation", "hours": 4, "uses": "gpu"},
            {"name": "main runs", "variants": [v["name"] for v in vs]},
            {"name": "error analysis and predictions", "hours": 12, "uses": "host"},
        ],
    )
