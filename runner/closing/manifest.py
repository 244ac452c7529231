"""The output folder: what leaves the host and can be read again later without this machine.

`<output_dir>/` holds, per run, `runs/<id>/` with its frozen parameters (`run.toml`), raw metrics,
predictions, error analysis and stop reason (`stop.json`), plus the final artifact and expected
files of approved runs; `manifest.toml` (tomli-w) lists the campaign, the bundle and order
reference, the frozen plan, every run (id, variant, category, state, stop reason, config hash, base
revision for adapters) and every file with its bytes and sha256; `RELOAD.md` gives the exact
commands that reload each approved artifact. Every file is written atomically. Large artifacts are
hard-linked when they can be (checkpoints are renamed into place, never rewritten), else copied.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tomli_w

from campaign_train.atomic import fsync_dir, write_bytes_atomic, write_json_atomic, write_text_atomic
from campaign_train.formats import sha256_file
from runner.campaign.json_numbers import as_number
from runner.campaign.objects import Campaign
from runner.closing.deliverables import RunCheck, Verification, describe_end, verify_campaign
from runner.closing.ledger_reads import ledger_for
from runner.closing.pilot import all_decisions, frozen_plan
from runner.closing.reload_guide import reload_markdown
from runner.ledger import queries
from runner.ledger.states import RunState

MANIFEST_FORMAT = "campaign-manifest/1"
RAW_FILES = ("run.toml", "metrics.jsonl", "predictions.jsonl", "error_analysis.json")
LINK_ABOVE_BYTES = 8 << 20  # bigger files are hard-linked (or copied) instead of read into memory


_refresh_lock = threading.Lock()


def refresh_output(campaign: Campaign, conn: sqlite3.Connection | None = None) -> Verification:
    """Verify every run and bring the output folder up to date.

    Meant for the runner as runs end, in a worker thread (`asyncio.to_thread`): it opens its own
    read-only ledger connection, grades artifacts in a child process, and refreshes one at a time."""
    with _refresh_lock:
        return _refresh(campaign, conn)


def _refresh(campaign: Campaign, conn: sqlite3.Connection | None) -> Verification:
    with ledger_for(campaign, conn) as conn:
        verification = verify_campaign(campaign, conn)
        write_output(campaign, verification, conn)
    return verification


def write_output(
    campaign: Campaign, verification: Verification, conn: sqlite3.Connection | None = None, now: float | None = None
) -> Path:
    """Copy each run's files into the output folder, then write manifest.toml and RELOAD.md."""
    now = time.time() if now is None else now
    out = campaign.output_path
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for check in verification.checks:
        runs.append(_deliver_run(campaign, check, out, _resume_point(conn, check)))
    plan = frozen_plan(conn) if conn is not None else None
    decisions = all_decisions(conn) if conn is not None else []
    manifest = build_manifest(campaign, verification, runs, plan, decisions, now)
    write_bytes_atomic(out / "manifest.toml", tomli_w.dumps(_tomlable(manifest)).encode("utf-8"))
    write_text_atomic(out / "RELOAD.md", reload_markdown(campaign, verification, runs))
    return out / "manifest.toml"


def _resume_point(conn: sqlite3.Connection | None, check: RunCheck) -> Path | None:
    """The latest verified checkpoint of a run the wrap-up stopped: it travels, to resume elsewhere."""
    if conn is None or check.approved or not (check.run.stop_reason or "").startswith("wrap-up"):
        return None
    newest = next(iter(queries.newest_checkpoints(conn, check.run.id, verified=True)), None)
    return newest if newest is not None and newest.is_file() else None


def _deliver_run(campaign: Campaign, check: RunCheck, out: Path, resume_point: Path | None = None) -> dict[str, Any]:
    """Copy one run's files under `out/runs/<id>/`; return its manifest entry's file list."""
    run = check.run
    dest_dir = out / "runs" / run.id
    dest_dir.mkdir(parents=True, exist_ok=True)
    sources: list[tuple[str, Path, str]] = []  # (path under dest_dir, source, kind)
    for name in RAW_FILES:
        src = run.run_dir / name
        if src.is_file():
            sources.append((name, src, _kind(name)))
    if resume_point is not None:
        rel = _relative_to_run(resume_point, run.run_dir)
        sources.append((rel, resume_point, "resume checkpoint"))
        if resume_point.with_suffix(".json").is_file():
            sources.append((str(Path(rel).with_suffix(".json")), resume_point.with_suffix(".json"), "resume sidecar"))
    if check.approved:
        for shown, path in check.files:
            if shown not in {s[0] for s in sources}:
                sources.append((shown, path, _kind(shown)))
        if check.artifact is not None and check.artifact not in {s[1] for s in sources}:
            rel = _relative_to_run(check.artifact, run.run_dir)
            sources.append((rel, check.artifact, "artifact"))
        # the checkpoint's sidecar travels with it: the grader checks the parts it lists
        for shown, src, kind in list(sources):
            sidecar = src.with_suffix(".json")
            if kind == "artifact" and sidecar.is_file():
                sources.append((str(Path(shown).with_suffix(".json")), sidecar, "artifact sidecar"))
    files = []
    folder_artifact = None
    for rel, src, kind in sources:
        if src.is_dir():  # a folder artifact (HF Trainer, PEFT, Accelerate, DCP...): each file in it
            if kind == "artifact" or kind == "expected file":
                kind = "artifact"
                folder_artifact = {"path": str((dest_dir / rel).relative_to(out)), "kind": "artifact", "bytes": 0}
            for f in sorted(p for p in src.rglob("*") if p.is_file()):
                dst = dest_dir / rel / f.relative_to(src)
                if _copy(f, dst):
                    files.append(_file_entry(out, dst, f, campaign, "artifact file" if kind == "artifact" else kind))
                    if folder_artifact is not None and kind == "artifact":
                        folder_artifact["bytes"] += files[-1]["bytes"]
            continue
        dst = dest_dir / rel
        if _copy(src, dst):
            files.append(_file_entry(out, dst, src, campaign, kind))
    if run.state != RunState.FINISHED:
        stop = _stop_record(check)
        write_json_atomic(dest_dir / "stop.json", stop)
        files.append(_file_entry(out, dest_dir / "stop.json", None, campaign, "stop reason"))
    return {"check": check, "files": files, "artifact_folder": folder_artifact}


def _relative_to_run(path: Path, run_dir: Path) -> str:
    try:
        return str(path.relative_to(run_dir))
    except ValueError:
        return path.name


def _kind(name: str) -> str:
    base = Path(name).name
    return {
        "run.toml": "parameters",
        "metrics.jsonl": "raw metrics",
        "predictions.jsonl": "predictions",
        "error_analysis.json": "error analysis",
    }.get(base, "artifact" if base.endswith((".pt", ".pth", ".ckpt", ".bin", ".safetensors")) else "expected file")


def _copy(src: Path, dst: Path) -> bool:
    """Put `src`'s bytes at `dst` atomically; skip when they are already there."""
    try:
        st = src.stat()
    except OSError:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        if dst.exists() and dst.stat().st_size == st.st_size and sha256_file(dst) == sha256_file(src):
            return True
    except OSError:
        pass
    if st.st_size <= LINK_ABOVE_BYTES:
        write_bytes_atomic(dst, src.read_bytes())
        return True
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    os.unlink(tmp)
    try:
        os.link(src, tmp)  # same bytes, no second copy; the source is never rewritten
    except OSError:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
    os.replace(tmp, dst)
    fsync_dir(dst.parent)
    return True


def _file_entry(out: Path, dst: Path, src: Path | None, campaign: Campaign, kind: str) -> dict[str, Any]:
    entry = {"path": str(dst.relative_to(out)), "kind": kind, "bytes": dst.stat().st_size, "sha256": sha256_file(dst)}
    if src is not None:
        try:
            entry["source"] = str(src.relative_to(campaign.root))
        except ValueError:
            entry["source"] = str(src)
    return entry


def _stop_record(check: RunCheck) -> dict[str, Any]:
    run = check.run
    record: dict[str, Any] = {
        "run": run.id,
        "variant": run.variant,
        "state": run.state,
        "reason": describe_end(run),
        "stop_reason": run.stop_reason,
        "rule": run.stop_rule,
        "value": as_number(run.stop_value),
        "step": run.stop_step,
        "ended_at": run.ended_at,
        "cut_by_decision": run.cut_by_decision,
    }
    for name in ("verdict.json", "exit.json", "abort.json"):
        try:
            record[name.removesuffix(".json")] = json.loads((run.run_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    return record


# ---------------------------------------------------------------------------------------------
# manifest.toml


def build_manifest(
    campaign: Campaign,
    verification: Verification,
    runs: list[dict[str, Any]],
    plan: dict[str, Any] | None,
    decisions: list[dict[str, Any]],
    now: float,
) -> dict[str, Any]:
    b = campaign.bundle
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "written_at": _iso(now),
        "campaign": {
            "name": campaign.name,
            "question": campaign.question,
            "file": campaign.path.name,
            "output_dir": campaign.output_dir,
        },
        "bundle": {
            "provider": b.provider,
            "gpu": b.gpu,
            "days": b.days,
            "gpus": b.gpus,
            "price_usd": b.price_usd,
            "price_from_catalog": b.price_from_catalog,
            "order_ref": b.order_ref or "not given",
            "started_at": _iso(b.started_at.timestamp()),
            "expires_at": _iso(b.expires_at.timestamp()),
            "retrieve_by": _iso(b.retrieve_by.timestamp()),
        },
        "summary": {
            "runs": len(verification.checks),
            "approved": len(verification.distinct_approved),
            "verify_ok": verification.ok,
        },
        "plan": plan if plan is not None else {"frozen": False, "note": "the runner has not frozen a plan yet"},
        "spend": [{"what": s.what, "usd": s.usd} for s in campaign.spend],
        "decision": [
            {"at": _iso(d["t"]), "who": d["who"], "how": d.get("how"), "choice": d["choice"]}
            | {"variants": d["variants"], "dropped": d.get("dropped") or [], "note": d["note"]}
            for d in decisions
        ],
        "run": [],
    }
    if decisions == []:
        manifest.pop("decision")
    for entry in runs:
        check: RunCheck = entry["check"]
        run = check.run
        item: dict[str, Any] = {
            "id": run.id,
            "variant": run.variant,
            "category": run.category,
            "state": run.state,
            "config_hash": run.config_hash,
            "approved": check.approved,
            "problems": check.problems,
            "attempts": run.attempts,
            "planned_hours": run.planned_hours,
            "active_hours": round(run.active_seconds / 3600.0, 6),
            "launched_at": _iso(run.launched_at),
            "ended_at": _iso(run.ended_at),
            "stop_reason": describe_end(run) if run.state != RunState.FINISHED else None,
            "stop_rule": run.stop_rule,
            "stop_value": as_number(run.stop_value),
            "stop_step": run.stop_step,
            "duplicate_of": check.duplicate_of,
            "files": entry["files"],
        }
        adapter = bool(run.frozen_variant.get("adapter", False))
        if not adapter:
            try:
                adapter = campaign.variant(run.variant).adapter
            except KeyError:
                pass
        if adapter:
            item["adapter"] = True
            item["base_revision"] = check.base_revision or "MISSING"
        resume = next((f["path"] for f in entry["files"] if f.get("kind") == "resume checkpoint"), None)
        if resume is not None:  # stopped by the wrap-up: where `campaign resume` elsewhere starts from
            item["resume_checkpoint"] = resume
        if check.artifact is not None and check.approved:
            item["artifact"] = next((f["path"] for f in entry["files"] if f.get("kind") == "artifact"), None)
            item["artifact_grade"] = (check.artifact_check or {}).get("grade")
        manifest["run"].append(item)
    return manifest


def _tomlable(obj: Any) -> Any:
    """TOML has no null: drop None values (and empty tables inside lists stay tables)."""
    if isinstance(obj, dict):
        return {str(k): _tomlable(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_tomlable(v) for v in obj if v is not None]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
