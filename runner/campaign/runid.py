"""Run identity: `<variant>-<8 hex>`, the digits a hash of everything that defines the run.

Hashed: the command and resume command, the variant's environment, GPU count, how its metrics and
checkpoints are found, its base revision and expected outputs, the checkpoint interval, the rules
that apply to it (as the campaign file writes them), and its inputs: every command argument that
names a file inside the campaign folder contributes its relative path and its content (a hash of
the bytes for files up to 8 MiB, the size and modification time above that). So a fixed script or
a changed rule gives a new id, while resuming the same configuration keeps its id (resume reuses
the recorded id, it does not recompute it). The variant's category and planned hours are not part
of the identity: they say how the run is scheduled, not what it computes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from runner.campaign.objects import Campaign, Variant

SMALL_FILE_BYTES = 8 * 1024 * 1024


def raw_variant(campaign: Campaign, name: str) -> dict[str, Any]:
    """The variant's table as the campaign file writes it."""
    for tbl in campaign.raw.get("variant", []):
        if isinstance(tbl, dict) and tbl.get("name") == name:
            return dict(tbl)
    raise KeyError(name)


def raw_rules(campaign: Campaign, variant: str) -> list[dict[str, Any]]:
    """The rules that apply to `variant`, as the campaign file writes them (durations as written)."""
    raws = campaign.raw.get("rule", [])
    return [dict(raw) for raw, rule in zip(raws, campaign.rules) if rule.applies_to(variant)]


def _input_fingerprint(root: Path, arg: str) -> dict[str, Any] | None:
    if not arg or arg.startswith("-") or len(arg) > 4096:
        return None
    try:
        p = (root / arg).resolve()
        p.relative_to(root.resolve())
        if not p.is_file():
            return None
        st = p.stat()
    except (OSError, ValueError):
        return None
    rel = str(p.relative_to(root.resolve()))
    if st.st_size <= SMALL_FILE_BYTES:
        try:
            return {"path": rel, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        except OSError:
            return None
    return {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def identity(campaign: Campaign, variant: Variant) -> dict[str, Any]:
    """Everything hashed into the id, as a JSON-able dict (kept in the ledger's launch event)."""
    raw = raw_variant(campaign, variant.name)
    args = list(variant.command) + list(variant.resume_command or ())
    inputs = [f for f in (_input_fingerprint(campaign.root, a) for a in args) if f]
    inputs += [f for f in (_input_fingerprint(campaign.root, v) for _, v in variant.env) if f]
    out: dict[str, Any] = {
        "variant": variant.name,
        "command": list(variant.command),
        "resume_command": list(variant.resume_command) if variant.resume_command else None,
        "env": dict(variant.env),
        "gpus": variant.gpus,
        "checkpoint_every": raw.get("checkpoint_every"),
        "metrics_regex": variant.metrics_regex,
        "checkpoint_glob": variant.checkpoint_glob,
        "base_revision": variant.base_revision,
        "expects": list(variant.expects),
        "rules": raw_rules(campaign, variant.name),
        "inputs": sorted(inputs, key=lambda f: f["path"]),
    }
    if variant.metrics_format:  # only when set, as below
        out["metrics_format"] = variant.metrics_format
    if variant.trust_pickled_module:  # only when set: the ids of every other run stay as they were
        out["trust_pickled_module"] = True
    return out


def config_hash(campaign: Campaign, variant: Variant) -> str:
    """The 8 hex digits."""
    text = json.dumps(identity(campaign, variant), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def run_id(campaign: Campaign, variant: Variant) -> str:
    return f"{variant.name}-{config_hash(campaign, variant)}"
