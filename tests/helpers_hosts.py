"""Campaign files with [[host]] tables, for the several-hosts tests (real files, real parsing)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
from helpers_plan import brief_campaign


def two_host_brief(folder: Path, *, hosts: list[dict] | None = None, variants: dict[str, dict] | None = None) -> Path:
    """The brief's 78-hour example (48 h + 30 h of work, RTX 4090, 3-day bundles) on two 3-day
    hosts `a` and `b`; `variants` adds keys to named variants (e.g. {"control": {"host": "a"}})."""
    path = brief_campaign(folder, extra_variants=True)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data["host"] = hosts or [
        {"name": "a", "ssh": "user@10.0.0.1", "dir": "/srv/camp"},
        {"name": "b", "ssh": "gpu-b", "port": 2222, "dir": "/srv/camp"},
    ]
    for v in data["variant"]:
        v.update((variants or {}).get(v["name"], {}))
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path
