"""The status snapshot (docs/INTERNALS.md): the bundle's clock, the GPUs, the slots and every run.

Built from the ledger alone plus what only a live runner knows (its pid, its slot plan), so the
same function answers the socket's `status` op and `campaign status` while the runner is down (a
read-only connection then). Non-finite floats come out as "nan"/"inf"/"-inf" strings.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import time
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from runner.campaign.clock import read_clock
from runner.campaign.durations import parse_duration
from runner.campaign.json_numbers import as_number
from runner.campaign.objects import Campaign, Rule
from runner.closing.pilot import pilot_status
from runner.daemon.protocol import sanitize
from runner.daemon.slots import order_key
from runner.daemon.status_types import (
    BundleInfo,
    CampaignInfo,
    RuleState,
    RunRow,
    Snapshot,
    VariantInfo,
    fin,
)
from runner.ledger import queries
from runner.ledger import store as L
from runner.ledger.records import RunRecord
from runner.ledger.states import RuleStatus, RunState
from runner.supervision.line_parsers import empty_match_warning

_frozen_cache: dict[str, tuple[float, dict]] = {}


def iso(d: dt.datetime) -> str:
    return d.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def frozen_config(run_dir: str | Path) -> dict:
    """The run's run.toml as a dict ({} when missing or unreadable); cached by modification time."""
    path = Path(run_dir) / "run.toml"
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return {}
    hit = _frozen_cache.get(str(path))
    if hit and hit[0] == mtime:
        return hit[1]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    _frozen_cache[str(path)] = (mtime, data)
    return data


def rule_from_raw(raw: dict) -> Rule | None:
    """A frozen rule (as written in run.toml) as a Rule, or None when it cannot be read."""
    try:
        kind = raw["kind"]
        within = raw.get("within")
        return Rule(
            kind=kind,
            metric=raw.get("metric", "loss" if kind == "nonfinite" else None),
            threshold=float(raw["threshold"]) if "threshold" in raw else None,
            after_step=int(raw.get("after_step", 0)),
            max_fraction=float(raw.get("max_fraction", 0.0)) if kind == "truncated" else None,
            within_s=parse_duration(within) if within else None,
            variants=tuple(raw.get("variants", ())),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def rule_states(
    rules: list[Rule], run: RunRecord, metrics: dict[str, dict], prog: dict, ckpts: list[dict], now: float
) -> list[RuleState]:
    """Each frozen rule: ok, fired or waiting (not yet judgeable), with the value it judges."""
    out = []
    running = run.state == RunState.RUNNING
    started = run.attempt_started_at or run.launched_at
    for r in rules:
        state, value = RuleStatus.WAITING, None
        if run.state == RunState.STOPPED and run.stop_rule == r.kind:
            state, value = RuleStatus.FIRED, as_number(run.stop_value)
        elif r.kind == "nonfinite":
            m = metrics.get(r.metric or "loss")
            if m is not None and m["value"] is not None:
                value = m["value"]
                state = RuleStatus.OK if math.isfinite(value) else RuleStatus.FIRED
        elif r.kind in ("below", "above"):
            m = metrics.get(r.metric or "")
            if m is not None and m["value"] is not None:
                value = m["value"]
                step = m.get("step") or prog.get("last_step") or 0
                if step >= r.after_step:
                    bad = (value < r.threshold) if r.kind == "below" else (value > r.threshold)
                    state = RuleStatus.FIRED if bad or not math.isfinite(value) else RuleStatus.OK
        elif r.kind == "truncated":
            samples = prog.get("samples") or 0
            if samples > 0:
                value = (prog.get("truncated") or 0) / samples
                state = RuleStatus.FIRED if value > (r.max_fraction or 0.0) else RuleStatus.OK
        elif r.kind == "no_resume_point":
            verified = [c for c in ckpts if c.get("verified")]
            if verified:
                state, value = RuleStatus.OK, verified[-1].get("step")
            elif running and started and r.within_s:
                value = r.within_s - (now - started)  # seconds left to save a verified one
                state = RuleStatus.WAITING
        elif r.kind == "stalled":
            last = prog.get("last_t") or started
            if running and last and r.within_s:
                value = now - last
                state = RuleStatus.OK if value < r.within_s else RuleStatus.FIRED
            elif not running:
                state = RuleStatus.OK if prog.get("lines") else RuleStatus.WAITING
        out.append(RuleState(kind=r.kind, text=r.describe(), state=state, value=fin(value)))
    return out


def run_row(
    run: RunRecord, campaign: Campaign | None, metrics: dict[str, dict], prog: dict, ckpts: list[dict], now: float
) -> RunRow:
    """One run as the snapshot shows it."""
    frozen = frozen_config(run.run_dir)
    rules = [r for r in (rule_from_raw(x) for x in frozen.get("rule", [])) if r is not None]
    if not frozen and campaign is not None:
        rules = list(campaign.rules_for(run.variant))
    every = None
    fv = frozen.get("variant", {})
    if isinstance(fv.get("checkpoint_every"), str):
        try:
            every = parse_duration(fv["checkpoint_every"])
        except ValueError:
            every = None
    elif campaign is not None:
        try:
            every = campaign.variant(run.variant).checkpoint_every_s
        except KeyError:
            every = None
    running = run.state == RunState.RUNNING
    started = run.attempt_started_at or run.launched_at
    latest = max(ckpts, key=lambda c: ((c.get("step") if c.get("step") is not None else -1), c["t"])) if ckpts else None
    next_ckpt = None
    if running and every:
        base = max([x for x in (started, latest["t"] if latest else None) if x] or [now])
        next_ckpt = every - (now - base)
    # an abort or a rule stop marks the run at once, while its attempt is still ending: that
    # attempt's time counts until the runner records the end (the column never drops to 0)
    ending = run.state in (RunState.ABORTED, RunState.STOPPED) and not run.ended_at and bool(run.attempts)
    elapsed = (run.active_seconds or 0.0) + ((now - started) if (running or ending) and started else 0.0)
    planned = run.planned_hours
    expected = max(planned or 0.0, elapsed / 3600.0) if planned is not None else None
    empty = prog.get("matched_no_numbers") or 0
    problem = None
    if latest and latest.get("problems"):
        problem = "; ".join(map(str, latest["problems"]))
    return RunRow(
        id=run.id,
        variant=run.variant,
        category=run.category,
        state=run.state,
        pid=run.pid if running else None,
        step=prog.get("last_step"),
        loss=fin((metrics.get("loss") or {}).get("value")),
        metrics={k: fin(v["value"]) for k, v in metrics.items()},
        checkpoint_path=latest["path"] if latest else None,
        checkpoint_step=latest.get("step") if latest else None,
        checkpoint_verified=(bool(latest["verified"]) if latest and latest.get("verified") is not None else None),
        checkpoint_problem=problem,
        **verify_lag(ckpts, now),
        next_checkpoint_seconds=fin(next_ckpt),
        stop_reason=run.stop_reason,
        stop_rule=run.stop_rule,
        stop_value=fin(as_number(run.stop_value)),
        launched_at=run.launched_at,
        ended_at=run.ended_at,
        elapsed_seconds=fin(elapsed),
        planned_hours=planned,
        expected_hours=fin(expected),
        attempts=run.attempts or 0,
        gpu_slot=run.gpu_slot,
        run_dir=str(run.run_dir),
        lines=prog.get("lines") or 0,
        bad_lines=prog.get("bad_lines") or 0,
        step_rate=fin(prog.get("step_rate")),
        rules=rule_states(rules, run, metrics, prog, ckpts, now),
        matched_no_numbers=empty,
        metrics_warning=empty_match_warning(empty, prog.get("lines") or 0, fv.get("metrics_format")) if empty else None,
    )


def bundle_info(campaign: Campaign, now: float) -> BundleInfo:
    b = campaign.bundle
    clock = read_clock(b, now)
    return BundleInfo(
        provider=b.provider,
        gpu=b.gpu,
        days=b.days,
        plan=b.plan_label,
        price_usd=fin(b.price_usd),
        gpus=b.gpus,
        order_ref=b.order_ref,
        started_at=iso(b.started_at),
        expires_at=iso(b.expires_at),
        remaining_seconds=fin(clock.remaining_seconds),
        retrieve_by=iso(b.retrieve_by),
        retrieve_seconds=fin(clock.to_retrieve_seconds),
        warning=clock.level,
    )


def retrieval_info(conn: sqlite3.Connection) -> Any:
    """The last `campaign pull` that verified every file on the user's machine (None: not yet, or
    a run launched or ended since: runner.ledger.queries.current_retrieval)."""
    return sanitize(queries.current_retrieval(conn))


def campaign_info(campaign: Campaign) -> CampaignInfo:
    return CampaignInfo(
        name=campaign.name, question=campaign.question, root=str(campaign.root), file=str(campaign.path)
    )


def variant_infos(campaign: Campaign, runs_of: dict[str, list[str]]) -> list[VariantInfo]:
    """Each declared variant with the ids of its runs (`runs_of`: variant name -> ids, in order)."""
    return [
        VariantInfo(name=v.name, category=v.category, hours=v.hours, runs=list(runs_of.get(v.name, ())))
        for v in campaign.variants
    ]


def verify_lag(ckpts: list[dict], now: float) -> dict:
    """Verification behind saving: checkpoints seen but not yet judged, newer than the newest
    judged one, and how long the oldest of them has waited (0 and None when none waits)."""
    judged = [c.get("step") or -1 for c in ckpts if c.get("verified") is not None]
    newest = max(judged, default=None)
    waiting = [c for c in ckpts if c.get("verified") is None and (newest is None or (c.get("step") or -1) > newest)]
    oldest = min((c["t"] for c in waiting if isinstance(c.get("t"), (int, float))), default=None)
    return {
        "verify_waiting": len(waiting),
        "verify_lag_seconds": fin(None if oldest is None else max(0.0, now - oldest)),
    }


def gpu_info(nvml: Any | None) -> tuple[list[dict], str | None]:
    if nvml is None:
        from runner.daemon.nvml import Nvml

        nvml = Nvml.shared()
    return [sanitize(g.as_dict()) for g in nvml.sample()], nvml.error


def pilot_info(campaign: Campaign, conn: sqlite3.Connection) -> Any:
    """The pilot's status for the snapshot (an error entry if it fails: the status still answers)."""
    try:
        return sanitize(pilot_status(campaign, conn))
    except Exception as exc:  # a broken hook must not take the status down
        return {"state": "error", "error": f"{type(exc).__name__}: {exc}"}


def build_snapshot(
    campaign: Campaign,
    conn: sqlite3.Connection | None,
    *,
    runner: dict | None = None,
    slots: dict | None = None,
    nvml: Any | None = None,
    now: float | None = None,
    runner_error: str | None = None,
) -> Snapshot:
    """The whole snapshot, read from the ledger. `conn` None: no ledger yet (nothing has run)."""
    now = time.time() if now is None else now
    runs = L.all_runs(conn) if conn is not None else []
    metrics = L.metric_last(conn) if conn is not None else {}
    progress = L.progress(conn) if conn is not None else {}
    ckpts_by_run: dict[str, list[dict]] = {}
    for c in L.checkpoints(conn) if conn is not None else []:
        ckpts_by_run.setdefault(c["run_id"], []).append(c)
    rows = [
        run_row(r, campaign, metrics.get(r.id, {}), progress.get(r.id, {}), ckpts_by_run.get(r.id, []), now)
        for r in runs
    ]
    queued = sorted((r for r in runs if r.state == RunState.QUEUED), key=order_key(campaign))
    gpus, nvml_error = gpu_info(nvml)
    if slots is None:
        slots = {"total": None, "busy": sum(1 for r in runs if r.state == RunState.RUNNING)}
    runs_of: dict[str, list[str]] = {}
    for r in runs:
        runs_of.setdefault(r.variant, []).append(r.id)
    return Snapshot(
        now=now,
        campaign=campaign_info(campaign),
        bundle=bundle_info(campaign, now),
        gpus=gpus,
        nvml_error=nvml_error,
        slots=slots,
        runner=runner,
        runs=rows,
        queue=[r.variant for r in queued],
        variants=variant_infos(campaign, runs_of),
        pilot=pilot_info(campaign, conn) if conn is not None else None,
        events=sanitize(L.events(conn, limit=20)) if conn is not None else [],
        # the last `campaign pull` that verified every file on the user's machine (None: not yet)
        retrieval=retrieval_info(conn) if conn is not None else None,
        runner_error=(runner_error or "the runner is not running") if runner is None else None,
    )


def offline_snapshot(campaign: Campaign, *, runner_error: str | None = None) -> dict:
    """What `campaign status` shows while the runner is down: the ledger, read-only, as JSON-ready
    builtins (the same keys the runner sends)."""
    from runner.campaign.statedir import paths_for

    path = paths_for(campaign).ledger
    if not path.exists():
        return msgspec.to_builtins(build_snapshot(campaign, None, runner_error=runner_error))
    conn = L.connect(path, readonly=True)
    try:
        snap = msgspec.to_builtins(build_snapshot(campaign, conn, runner_error=runner_error))
    finally:
        conn.close()
    for row in snap["runs"]:
        _settle_offline(row)
    return snap


def _settle_offline(row: dict) -> None:
    """A run the ledger last saw `running`, checked against its folder: with the runner down
    nobody records its end, and a whole-host kill leaves the ledger saying `running` for a run
    that is gone. Its supervisor (pid and start time) still alive: running. Gone: the state the
    runner will record at the next `up`, from the same files (INTERNALS.md)."""
    if row.get("state") != RunState.RUNNING or not row.get("run_dir"):
        return
    from campaign_train.atomic import read_json
    from runner.daemon.watcher import derive_end
    from runner.supervision.proctree import is_alive

    run_dir = Path(row["run_dir"])
    attempt = int(row.get("attempts") or 1)
    sup = read_json(run_dir / "supervisor.json")
    if not isinstance(sup, dict) or sup.get("attempt") != attempt:
        return  # not started yet, or starting: nothing to judge by
    if is_alive(sup.get("pid"), sup.get("create_time")):
        return
    state, reason = derive_end(read_json(run_dir / "exit.json"), read_json(run_dir / "verdict.json"), attempt)
    row["state"], row["pid"], row["next_checkpoint_seconds"] = state, None, None
    if state != RunState.FINISHED:
        row["stop_reason"] = reason or row.get("stop_reason")
