"""Which runs are approved deliverables, and for each one that is not, the named problems.

A run is approved only when it finished, every file it must deliver is there and not empty, every
path it recorded stays inside the campaign folder and out of temporary folders, an adapter names
its base model's revision, and its final artifact reloads in a new interpreter. A file that exists
but cannot be read again is not verified output, so data files are parsed too.

Reads the ledger read-only and the run folders; never imports torch: checkpoints are loaded by
`python -m runner.grading.checkpoint_grade PATH --json` in a child process, so the console may call this.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.campaign.json_numbers import as_number
from runner.campaign.objects import Campaign, Variant
from runner.campaign.placeholders import expand
from runner.closing.artifact_reload import RELOAD_TIMEOUT_S, reload_artifacts
from runner.closing.ledger_reads import iter_jsonl, ledger_for, read_runs
from runner.grading.interpreter import grader_python
from runner.ledger import queries
from runner.ledger.queries import RunRecord
from runner.ledger.states import RunState

# What the training-side helpers write (campaign_train.predictions.DEFAULT_EXPECTS; restated here because
# that module imports torch and this one must not — a test keeps the two equal).
DEFAULT_EXPECTS = ("predictions.jsonl", "error_analysis.json", "checkpoints/final.pt")
ARTIFACT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors")
ARTIFACT_FOLDER_MARKS = {"adapter_config.json", "trainer_state.json", ".metadata", "latest", "config.json"}

_TEMP_PART = re.compile(r"^(\.?te?mp|tmp[_-]?[a-z0-9_]{6,})$", re.IGNORECASE)


@dataclass
class RunCheck:
    """The verdict on one run: approved, or the problems that block it."""

    run: RunRecord
    problems: list[str] = field(default_factory=list)
    files: list[tuple[str, Path]] = field(default_factory=list)  # (path as delivered, absolute path)
    artifact: Path | None = None
    artifact_check: dict[str, Any] | None = None
    base_revision: str | None = None  # the revision the adapter was trained on (recorded, else declared)
    adapter: bool = False
    trust_pickled_module: bool = False  # the variant's opt-in: a pickled nn.Module is reloaded by unpickling
    duplicate_of: str | None = None  # approved, but the same configuration was counted already

    @property
    def approved(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.run.id,
            "variant": self.run.variant,
            "state": self.run.state,
            "approved": self.approved,
            "problems": list(self.problems),
            "duplicate_of": self.duplicate_of,
            "artifact": str(self.artifact) if self.artifact else None,
        }


@dataclass
class Verification:
    checks: list[RunCheck]

    @property
    def approved(self) -> list[RunCheck]:
        return [c for c in self.checks if c.approved]

    @property
    def distinct_approved(self) -> list[RunCheck]:
        """Approved runs counted once per configuration: a re-run does not make a new deliverable."""
        return [c for c in self.approved if c.duplicate_of is None]

    @property
    def ok(self) -> bool:
        """Something was approved and no run that finished failed its checks.

        Stopped, aborted and refused runs are never deliverables; they do not make verify fail."""
        if not self.approved:
            return False
        return all(c.approved for c in self.checks if c.run.state == RunState.FINISHED)

    def check(self, run_id: str) -> RunCheck | None:
        return next((c for c in self.checks if c.run.id == run_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "approved": len(self.distinct_approved), "runs": [c.to_json() for c in self.checks]}


# ---------------------------------------------------------------------------------------------
# Verifying


def verify_campaign(
    campaign: Campaign, conn: sqlite3.Connection | None = None, *, reload_timeout: float = RELOAD_TIMEOUT_S
) -> Verification:
    """Check every run in the ledger. Opens the ledger read-only when `conn` is not given."""
    with ledger_for(campaign, conn) as conn:
        runs = read_runs(conn)
        checks = [_static_checks(campaign, conn, run) for run in runs]
    # Reload the final artifacts of runs that passed everything else, in a fresh interpreter.
    todo = [(c, c.artifact) for c in checks if c.artifact is not None and (c.approved or c.adapter)]
    # one grading interpreter per run's Python (the tool's own when it has torch)
    by_python: dict[str, list[tuple[RunCheck, Path]]] = {}
    for c, artifact in todo:
        command = c.run.frozen_variant.get("command")
        python = grader_python(command if isinstance(command, list) else None, campaign.root)
        by_python.setdefault(python, []).append((c, artifact))
    pairs: list[tuple[tuple[RunCheck, Path], dict[str, Any]]] = []
    for python, group in by_python.items():
        results = reload_artifacts(
            [artifact for _, artifact in group],
            reload_timeout,
            trust_pickled_module=[c.trust_pickled_module for c, _ in group],
            python=python,
        )
        pairs += zip(group, results)
    for (c, artifact), result in pairs:
        c.artifact_check = result
        if c.approved and not result.get("verified"):
            why = "; ".join(result.get("problems") or []) or f"grade {result.get('grade')}"
            c.problems.append(f"does not reload: {_shown(campaign, artifact)}: {why}")
    for c in checks:
        if c.adapter:
            _adapter_revision(c)
    counted: dict[str, str] = {}
    for c in checks:
        if c.approved:
            if c.run.config_hash in counted:
                c.duplicate_of = counted[c.run.config_hash]
            else:
                counted[c.run.config_hash] = c.run.id
    return Verification(checks)


def _static_checks(campaign: Campaign, conn: sqlite3.Connection | None, run: RunRecord) -> RunCheck:
    check = RunCheck(run)
    problems = check.problems
    variant = _variant(campaign, run)
    if run.state != RunState.FINISHED:
        problems.append(f"not finished: {describe_end(run)}")
    # Adapters must name the exact base revision (the frozen run.toml wins over today's file).
    frozen = run.frozen_variant
    adapter = bool(frozen.get("adapter", variant.adapter if variant else False))
    base = frozen.get("base_revision", variant.base_revision if variant else None)
    check.base_revision = base if isinstance(base, str) and base.strip() else None
    check.adapter = adapter
    check.trust_pickled_module = bool(
        frozen.get("trust_pickled_module", variant.trust_pickled_module if variant else False)
    )
    # Expected files: present, not empty, readable again.
    patterns = expected_patterns(variant, frozen)
    for pattern in patterns:
        matches, problem = _match(campaign, run, pattern)
        if problem:
            problems.append(problem)
            continue
        if not matches:
            problems.append(f"missing: {pattern}")
            continue
        for shown, path in matches:
            check.files.append((shown, path))
            size = _size(path)
            if size == 0:
                problems.append(f"empty: {shown} (0 bytes)")
            elif size is None:
                problems.append(f"unreadable: {shown}")
            else:
                bad = parse_problem(path)
                if bad:
                    problems.append(f"does not parse: {shown}: {bad}")
    # Recorded paths: inside the campaign, never in a temporary folder.
    for what, recorded in recorded_paths(conn, run):
        where = path_problem(campaign, recorded)
        if where:
            problems.append(f"{where}: {what} {recorded}")
    for shown, path in check.files:
        where = path_problem(campaign, path)
        if where:
            problems.append(f"{where}: {shown} resolves to {os.path.realpath(path)}")
    # The final artifact: a checkpoint-like expected file, else the run's last recorded checkpoint.
    check.artifact = _final_artifact(conn, run, check.files)
    if check.artifact is None:
        problems.append("no final artifact: the run delivered no checkpoint to reload")
    return check


def _adapter_revision(check: RunCheck) -> None:
    """An adapter's base revision: what its adapter_config.json records wins over the campaign
    file; a declared revision that contradicts it, or none anywhere, blocks approval."""
    declared = check.base_revision
    recorded = (check.artifact_check or {}).get("base_revision")
    recorded = recorded if isinstance(recorded, str) and recorded.strip() else None
    if recorded and declared and recorded != declared:
        check.problems.append(
            f"base revision mismatch: the variant declares base_revision {declared!r}, "
            f"but the adapter's adapter_config.json records {recorded!r}"
        )
    check.base_revision = recorded or declared
    if check.base_revision is None:
        check.problems.append(
            "adapter without base revision: set base_revision in its [[variant]] "
            "(its adapter_config.json records none either)"
        )


def _variant(campaign: Campaign, run: RunRecord) -> Variant | None:
    try:
        return campaign.variant(run.variant)
    except KeyError:
        return None


def expected_patterns(variant: Variant | None, frozen: dict[str, Any]) -> tuple[str, ...]:
    """What the run must deliver: its `expects`, or the helpers' defaults for runs that use them.

    A run that uses the training helpers is one that neither parses stdout (`metrics_regex`,
    `metrics_format`) nor
    watches files of its own (`checkpoint_glob`)."""
    expects = frozen.get("expects")
    if not isinstance(expects, list):
        expects = list(variant.expects) if variant else []
    if expects:
        return tuple(str(x) for x in expects)
    regex = frozen.get("metrics_regex", variant.metrics_regex if variant else None)
    glob = frozen.get("checkpoint_glob", variant.checkpoint_glob if variant else None)
    fmt = frozen.get("metrics_format", variant.metrics_format if variant else None)
    return DEFAULT_EXPECTS if regex is None and glob is None and fmt is None else ()


def _match(campaign: Campaign, run: RunRecord, pattern: str) -> tuple[list[tuple[str, Path]], str | None]:
    """Files matching `pattern`, looked for in the run folder, then in the campaign folder."""
    pattern = expand(pattern, run.id)
    if Path(pattern).is_absolute():
        return [], f"outside the campaign: expects names the absolute path {pattern}"
    if ".." in Path(pattern).parts:
        return [], f"outside the campaign: expects names {pattern}"
    for base in (run.run_dir, campaign.root):
        found = sorted(p for p in base.glob(pattern) if p.is_file() or _artifact_folder(p))
        if found:
            return [
                (str(p.relative_to(base)) if base == run.run_dir else str(p.relative_to(campaign.root)), p)
                for p in found
            ], None
    return [], None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def parse_problem(path: Path) -> str | None:
    """Why a data file cannot be read back (JSON, JSON lines, TOML); None when it reads."""
    suffix = path.suffix.lower()
    n = 0
    try:
        if suffix == ".jsonl":
            with open(path, "rb") as fh:
                for n, line in enumerate(fh, 1):  # noqa: B007  (n names the failing line below)
                    if line.strip():
                        json.loads(line)
        elif suffix == ".json":
            json.loads(path.read_bytes())
        elif suffix == ".toml":
            tomllib.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError, TOMLDecodeError and UnicodeDecodeError
        where = f"line {n}: " if suffix == ".jsonl" else ""
        return f"{where}{str(exc).splitlines()[0]}"
    except RecursionError:
        where = f"line {n}: " if suffix == ".jsonl" else ""
        return f"{where}nested too deeply to read back"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def recorded_paths(conn: sqlite3.Connection | None, run: RunRecord) -> list[tuple[str, str]]:
    """Every path the run's records point at: its folder, checkpoints, resume points."""
    out = [("run folder", str(run.run_dir))]
    if conn is not None:
        out += [("checkpoint", str(p)) for p in queries.checkpoint_paths(conn, run.id)]
    for obj in iter_jsonl(run.run_dir / "metrics.jsonl"):
        if obj.get("event") == "checkpoint" and isinstance(obj.get("path"), str):
            out.append(("checkpoint", obj["path"]))
        elif obj.get("event") == "start" and isinstance(obj.get("resumed_from"), str):
            out.append(("resume point", obj["resumed_from"]))
    try:
        launch = json.loads((run.run_dir / "launch.json").read_text(encoding="utf-8"))
        if isinstance(launch.get("resume_from"), str):
            out.append(("resume point", launch["resume_from"]))
    except (OSError, ValueError, AttributeError):
        pass
    seen, unique = set(), []
    for item in out:
        if item[1] not in seen:
            seen.add(item[1])
            unique.append(item)
    return unique


def path_problem(campaign: Campaign, path: str | Path) -> str | None:
    """'temporary path' or 'outside the campaign' for a path that must not be relied on."""
    p = Path(path)
    if not p.is_absolute():
        p = campaign.root / p
    real = Path(os.path.realpath(p))
    root = Path(os.path.realpath(campaign.root))
    if real != root and root not in real.parents:
        if any(t == real or t in real.parents for t in _temp_roots()):
            return "temporary path (outside the campaign)"
        return "outside the campaign"
    if any(_TEMP_PART.match(part) for part in real.relative_to(root).parts):
        return "temporary path"
    return None


def _temp_roots() -> list[Path]:
    roots = {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}
    return [Path(os.path.realpath(r)) for r in roots]


def _artifact_folder(path: Path) -> bool:
    """A folder that is one artifact (an HF/PEFT/Accelerate/DCP/DeepSpeed checkpoint folder)."""
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    return bool(names & ARTIFACT_FOLDER_MARKS) or any(n.endswith((".safetensors", ".bin", ".distcp")) for n in names)


def _final_artifact(conn: sqlite3.Connection | None, run: RunRecord, files: list[tuple[str, Path]]) -> Path | None:
    artifacts = [p for _, p in files if p.suffix.lower() in ARTIFACT_SUFFIXES or p.is_dir()]
    if artifacts:
        finals = [p for p in artifacts if p.stem == "final"]
        return (finals or artifacts)[-1]
    if conn is not None:
        return next(iter(queries.newest_checkpoints(conn, run.id)), None)
    return None


def describe_end(run: RunRecord) -> str:
    """How a run that is not a deliverable ended, in words. A stopped run always shows the value
    that broke its rule and the step, whatever the rule's own sentence says."""
    if run.state == RunState.STOPPED:
        what = f"stopped by rule {run.stop_rule}" if run.stop_rule else "stopped by a rule"
        detail = run.stop_reason or ""
        value = as_number(run.stop_value)
        if value is not None:
            shown = f"{value:.6g}" if math.isfinite(value) else str(value)
            step = f"step {run.stop_step}" if run.stop_step is not None else None
            if shown not in detail or (step is not None and step not in detail):
                detail = f"{detail} (value {shown}" + (f" at {step})" if step else ")")
        return f"{what}: {detail.strip()}" if detail else what
    if run.state in (RunState.ABORTED, RunState.REFUSED, RunState.FAILED):
        return f"{run.state}" + (f": {run.stop_reason}" if run.stop_reason else "")
    return f"still {run.state}"


def _shown(campaign: Campaign, path: Path) -> str:
    try:
        return str(path.relative_to(campaign.root))
    except ValueError:
        return str(path)


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
