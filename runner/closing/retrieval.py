"""What must leave the host, with each file's bytes and sha256: the list `campaign pull` copies.

The list: every file of the output folder (deliverables, `manifest.toml`, `RELOAD.md`, the
report), each run's latest verified checkpoint and its sidecar (the resume point worth keeping),
and each run's small records (its folder's files, checkpoints left out). A file the manifest lists
carries the manifest's sha256, so a file changed on the host after the manifest was written shows
up as changed on arrival; the others are hashed when the list is made. Files of a run still going
are marked `live`: they may grow while they travel.
"""

from __future__ import annotations

import socket
import sqlite3
import time
import tomllib
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from campaign_train.formats import sha256_file
from runner.campaign.objects import Campaign
from runner.closing.ledger_reads import ledger_for
from runner.ledger import store as L
from runner.ledger.states import PENDING_STATES

PULL_FORMAT = "campaign-pull/1"
TEMP_SUFFIXES = (".tmp", ".part", ".partial")


class Kind(StrEnum):
    DELIVERABLE = "deliverable"
    CHECKPOINT = "checkpoint"
    RECORDS = "records"


class HashFrom(StrEnum):
    MANIFEST = "manifest"  # the sha256 manifest.toml recorded when it was written
    SIDECAR = "sidecar"  # a checkpoint's sha256 as its writer recorded it (no re-read of gigabytes)
    NOW = "now"  # hashed when the list was made


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the campaign folder, `/`-separated
    bytes: int
    sha256: str
    kind: Kind
    hash_from: HashFrom
    live: bool = False  # a running run's file: it may change while it travels
    run: str | None = None


@dataclass
class RetrievalList:
    root: str  # the campaign folder on the host, absolute
    campaign: str
    host: str
    made_at: float
    files: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is left out, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PULL_FORMAT,
            "root": self.root,
            "campaign": self.campaign,
            "host": self.host,
            "made_at": self.made_at,
            "files": [{**asdict(e), "kind": e.kind.value, "hash_from": e.hash_from.value} for e in self.files],
            "total_bytes": sum(e.bytes for e in self.files),
            "notes": self.notes,
        }


def manifest_hashes(output: Path) -> dict[Path, str]:
    """sha256 of every file manifest.toml lists, by absolute path (empty when there is none)."""
    try:
        manifest = tomllib.loads((output / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[Path, str] = {}
    for run in manifest.get("run") or []:
        for f in run.get("files") or []:
            if isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str):
                out[output / f["path"]] = f["sha256"]
    return out


def _sidecar_sha256(path: Path, size: int) -> str | None:
    """The sha256 a checkpoint's sidecar records, when it describes a file of this size."""
    import json

    if path.suffix == ".json":
        return None
    try:
        side = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(side, dict) or side.get("bytes") != size or not isinstance(side.get("sha256"), str):
        return None
    return side["sha256"] if len(side["sha256"]) == 64 else None


def build_list(campaign: Campaign, conn: sqlite3.Connection | None = None, now: float | None = None) -> RetrievalList:
    """The retrieval list as it stands now (reads the ledger read-only)."""
    with ledger_for(campaign, conn) as conn:
        return _build(campaign, conn, time.time() if now is None else now)


def _build(campaign: Campaign, conn: sqlite3.Connection | None, now: float) -> RetrievalList:
    root = campaign.root.resolve()
    result = RetrievalList(str(root), campaign.name, socket.gethostname(), now)
    seen: set[Path] = set()

    def add(path: Path, kind: Kind, *, known: str | None = None, live: bool = False, run: str | None = None) -> None:
        path = path if path.is_absolute() else root / path
        if path in seen or not path.is_file() or path.name.endswith(TEMP_SUFFIXES):
            return
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            result.notes.append(f"{path}: outside the campaign folder, not pulled")
            return
        seen.add(path)
        st = path.stat()
        source = HashFrom.MANIFEST if known and not live else HashFrom.NOW
        if source is HashFrom.NOW and kind is Kind.CHECKPOINT:
            sidecar = _sidecar_sha256(path, st.st_size)
            if sidecar is not None:
                known, source = sidecar, HashFrom.SIDECAR
        digest = known if source is not HashFrom.NOW and known else sha256_file(path)
        result.files.append(Entry(rel.as_posix(), st.st_size, digest, kind, source, live, run))

    output = campaign.output_path
    if output.is_dir():
        known = manifest_hashes(output)
        for p in sorted(output.rglob("*")):
            add(p, Kind.DELIVERABLE, known=known.get(p))
    runs = L.all_runs(conn) if conn is not None else []
    ckpts = L.checkpoints(conn) if conn is not None else []
    all_ckpt_paths = {Path(c["path"]) for c in ckpts}
    for run in runs:
        live = run.state in PENDING_STATES
        mine = [c for c in ckpts if c["run_id"] == run.id]
        verified = [c for c in mine if c.get("verified")]
        if verified:
            best = max(verified, key=lambda c: (c.get("step") or -1, c.get("t") or 0.0))
            path = Path(best["path"])
            add(path, Kind.CHECKPOINT, run=run.id)
            add(path.with_suffix(".json"), Kind.CHECKPOINT, run=run.id)
        elif mine:
            result.notes.append(f"{run.id}: no verified checkpoint, none pulled")
        run_dir = run.run_dir
        if run_dir.is_dir():
            sidecars = {p.with_suffix(".json") for p in all_ckpt_paths}
            for p in sorted(run_dir.iterdir()):
                if p in all_ckpt_paths or p in sidecars:
                    continue
                add(p, Kind.RECORDS, live=live, run=run.id)
    return result
