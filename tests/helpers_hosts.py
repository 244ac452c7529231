"""Campaign files with [[host]] tables, for the several-hosts tests (real files, real parsing), and
a folder as `campaign pull FILE DEST` leaves it (real ledgers, snapshotted and moved as pull does)."""

from __future__ import annotations

import shutil
import time
import tomllib
from pathlib import Path

import tomli_w
from helpers_plan import brief_campaign
from helpers_report import CAMPAIGN_TOML, DECISION, VARIANT, add_run, open_writable

from runner.campaign.hosts import on_host
from runner.campaign.model import CAMPAIGN_FILE, load_campaign
from runner.closing.hosts_report import host_ledger
from runner.ledger.snapshot import rebase_paths, snapshot


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


# the two hosts of `pulled`: a (RTX 4090, the catalog's 47.14 USD), b (B200 at 120 USD)
PULLED_HOSTS = """
[[host]]
name = "a"
ssh = "gpu-a"
dir = "/srv/camp"

[[host]]
name = "b"
ssh = "root@203.0.113.7"
dir = "/srv/camp"
gpu = "B200"
price_usd = 120.0
"""


def pulled_campaign_text() -> str:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 6 * 3600))
    variants = (("control", "a"), ("rank16", "b"), ("rank64", "b"))
    tables = "".join(VARIANT.format(name=n, category="essential", hours=10, extra=f'host = "{h}"') for n, h in variants)
    text = CAMPAIGN_TOML.format(
        started=started,
        variants=", ".join(f'"{n}"' for n, _ in variants),
        variant_tables=tables,
        decision=DECISION,
    )
    return text + PULLED_HOSTS


def pulled(tmp_path: Path, runs: dict[str, list[dict]]) -> Path:
    """DEST as `campaign pull FILE DEST` leaves it, from host folders with real ledgers."""
    text = pulled_campaign_text()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / CAMPAIGN_FILE).write_text(text, encoding="utf-8")
    for host, host_runs in runs.items():
        there = tmp_path / "hosts" / host  # the host's own campaign folder
        there.mkdir(parents=True)
        (there / CAMPAIGN_FILE).write_text(text, encoding="utf-8")
        camp = on_host(load_campaign(there), host)
        conn = open_writable(camp)
        for kw in host_runs:
            add_run(conn, camp, **kw)
        conn.close()
        shutil.copytree(there / "runs", dest / host / "runs")
        copy = snapshot(camp.state_dir / "ledger.sqlite", host_ledger(dest, host))
        rebase_paths(copy, str(there), str((dest / host).resolve()))
        shutil.rmtree(there)  # the host is gone: only the pulled copies remain
    return dest
