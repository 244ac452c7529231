"""Judging a run by the stop rules frozen into it at launch.

Pure logic, no I/O: the supervisor feeds each metric record the moment it arrives (`feed`), calls
`tick` on a timer for the time-based rules (`stalled`, `no_resume_point`) and tells it when a
checkpoint was verified. The first rule broken yields a `Verdict`; after that the judge is done.
Rules come from the run's own `run.toml` `[[rule]]` tables, never from the live campaign file, so
a rule edited after launch does not apply to a run already going.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runner.campaign.durations import parse_duration
from runner.campaign.errors import CampaignError
from runner.campaign.numbers import metric_number
from runner.campaign.objects import RULE_KEYS, RULE_KINDS, Rule
from runner.ledger.states import RuleStatus


@dataclass(frozen=True)
class Verdict:
    """A broken rule: which, on what value, at which step and time, in one readable line."""

    rule: dict  # the rule's table as in run.toml
    kind: str
    metric: str | None
    value: float | None
    step: int | None
    at: float  # epoch seconds
    reason: str

    def to_json(self, attempt: int) -> dict:
        d = asdict(self)
        return {"attempt": attempt, **d}


def rule_from_table(tbl: dict, *, source: str | Path = "run.toml", index: int = 0) -> Rule:
    """A `[[rule]]` table (as written in the campaign file) as a `Rule`; CampaignError if bad."""

    def fail(msg: str, key: str | None = None) -> CampaignError:
        return CampaignError(msg, file=source, field=f"rule[{index}]" + (f".{key}" if key else ""))

    if not isinstance(tbl, dict):
        raise fail("expected a [[rule]] table")
    kind = tbl.get("kind")
    if kind not in RULE_KINDS:
        raise fail(f"{kind!r} is not one of {', '.join(RULE_KINDS)}", "kind")
    for key in tbl:
        if key not in RULE_KEYS[kind] | {"kind", "variants"}:
            raise fail(f"unknown key {key!r}", key)
    variants = tbl.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        raise fail("expected a list of variant names", "variants")

    def number(key: str, default: Any = None) -> float:
        v = tbl.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise fail(f"expected a number, got {v!r}", key)
        return float(v)

    if kind == "nonfinite":
        metric = tbl.get("metric", "loss")
        if not isinstance(metric, str):
            raise fail("expected a metric name", "metric")
        return Rule(kind=kind, metric=metric, variants=tuple(variants))
    if kind in ("below", "above"):
        metric = tbl.get("metric")
        if not isinstance(metric, str):
            raise fail("expected a metric name", "metric")
        after = tbl.get("after_step", 0)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise fail(f"expected a step number (0 or more), got {after!r}", "after_step")
        return Rule(kind=kind, metric=metric, threshold=number("threshold"), after_step=after, variants=tuple(variants))
    if kind == "truncated":
        frac = number("max_fraction", 0.0)
        if not 0.0 <= frac <= 1.0:
            raise fail(f"must be between 0 and 1, got {frac}", "max_fraction")
        return Rule(kind=kind, max_fraction=frac, variants=tuple(variants))
    within = tbl.get("within")
    if isinstance(within, (int, float)) and not isinstance(within, bool) and within > 0:
        seconds = float(within)  # already in seconds (a run.toml written by a program)
    else:
        try:
            seconds = parse_duration(within)
        except ValueError as exc:
            raise fail(str(exc), "within") from None
    return Rule(kind=kind, within_s=seconds, variants=tuple(variants))


def as_number(v: Any) -> float | None:
    """A metric value as a float (runner.campaign.numbers: never raises, a huge integer is inf)."""
    return metric_number(v)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.6g}"


class _RuleJudge:
    """One rule's running state: 'waiting' (nothing to judge yet), 'ok', or 'fired'."""

    def __init__(self, rule: Rule, table: dict, started_at: float) -> None:
        self.rule = rule
        self.table = table
        self.state = RuleStatus.WAITING
        self.value: float | None = None
        self.started_at = started_at
        self.truncated = 0.0
        self.samples = 0.0
        self.last_metric_at = started_at
        self.verified_at: float | None = None

    def status(self) -> dict:
        return {"kind": self.rule.kind, "text": self.rule.describe(), "state": self.state, "value": self.value}


class Judge:
    """The rules of one run. `feed(record)` and `tick(now)` return a Verdict when one breaks."""

    def __init__(
        self,
        tables: Iterable[dict],
        *,
        variant: str | None = None,
        started_at: float | None = None,
        source: str | Path = "run.toml",
    ) -> None:
        self.started_at = time.time() if started_at is None else started_at
        self.rules: list[_RuleJudge] = []
        for i, tbl in enumerate(tables):
            rule = rule_from_table(tbl, source=source, index=i)
            if variant is None or rule.applies_to(variant):
                self.rules.append(_RuleJudge(rule, dict(tbl), self.started_at))
        self.step: int | None = None
        self.verdict: Verdict | None = None
        self.records = 0
        self._by_metric: dict[str, list[_RuleJudge]] = {}
        for j in self.rules:
            if j.rule.metric is not None:
                self._by_metric.setdefault(j.rule.metric, []).append(j)
        self._truncation = [j for j in self.rules if j.rule.kind == "truncated"]
        self._timed = [j for j in self.rules if j.rule.kind in ("stalled", "no_resume_point")]
        for j in self._timed:
            j.state = RuleStatus.OK if j.rule.kind == "stalled" else RuleStatus.WAITING

    # -- inputs -------------------------------------------------------------------------------
    def feed(self, rec: dict, now: float | None = None) -> Verdict | None:
        """Judge one metric record (event lines are ignored here) the moment it arrives."""
        if self.verdict is not None or "event" in rec:
            return None
        now = time.time() if now is None else now
        self.records += 1
        step = rec.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            self.step = step
        elif isinstance(step, float) and math.isfinite(step):
            self.step = int(step)
        has_metric = False
        for name, raw in rec.items():
            if name in ("t", "step", "event"):
                continue
            value = as_number(raw)
            if value is None:
                continue
            has_metric = True
            for j in self._by_metric.get(name, ()):
                v = self._judge_metric(j, name, value, now)
                if v is not None:
                    return v
        if self._truncation and ("truncated" in rec or "samples" in rec):
            v = self._judge_truncation(rec, now)
            if v is not None:
                return v
        if has_metric:
            for j in self._timed:
                j.last_metric_at = now
        return None

    def checkpoint_verified(self, t: float | None = None) -> None:
        """A checkpoint of this run reloaded in a fresh process: a resume point exists."""
        t = time.time() if t is None else t
        for j in self._timed:
            if j.rule.kind == "no_resume_point" and j.state != RuleStatus.FIRED:
                j.state = RuleStatus.OK
                j.verified_at = t
                j.value = round(t - self.started_at, 3)

    def tick(self, now: float | None = None) -> Verdict | None:
        """Judge the time-based rules at `now`."""
        if self.verdict is not None:
            return None
        now = time.time() if now is None else now
        for j in self._timed:
            limit = j.rule.within_s
            if limit is None:  # the parser requires `within` for the timed kinds
                continue
            if j.rule.kind == "stalled":
                quiet = now - j.last_metric_at
                j.value = round(quiet, 3)
                if quiet > limit:
                    return self._fire(j, None, quiet, now, f"no new metric for {quiet:.0f} s (limit {limit:g} s)")
            elif j.verified_at is None:
                waited = now - self.started_at
                j.value = round(waited, 3)
                if waited > limit:
                    return self._fire(
                        j,
                        None,
                        waited,
                        now,
                        f"no verified checkpoint {waited:.0f} s after the start (limit {limit:g} s)",
                    )
        return None

    def next_deadline(self) -> float | None:
        """The earliest time at which `tick` could fire (for the supervisor's timer)."""
        times = []
        for j in self._timed:
            limit = j.rule.within_s
            if limit is None:
                continue
            if j.rule.kind == "stalled":
                times.append(j.last_metric_at + limit)
            elif j.verified_at is None:
                times.append(self.started_at + limit)
        return min(times) if times else None

    def statuses(self) -> list[dict]:
        """Per rule, for display: kind, text, state ('ok'/'fired'/'waiting'), value."""
        return [j.status() for j in self.rules]

    # -- judging ------------------------------------------------------------------------------
    def _judge_metric(self, j: _RuleJudge, name: str, value: float, now: float) -> Verdict | None:
        kind = j.rule.kind
        if kind == "nonfinite":
            j.value = value
            if not math.isfinite(value):
                return self._fire(j, name, value, now, f"{name} is {_fmt(value)}{_at_step(self.step)}")
            j.state = RuleStatus.OK
            return None
        if self.step is None or self.step < j.rule.after_step:
            j.value = value
            return None  # still waiting for after_step
        j.value = value
        threshold = j.rule.threshold
        if threshold is None:  # the parser requires a threshold for below/above
            return None
        broken = value < threshold if kind == "below" else value > threshold
        if broken:
            word = "below" if kind == "below" else "above"
            return self._fire(
                j,
                name,
                value,
                now,
                f"{name} = {_fmt(value)} is {word} "
                f"{threshold:g}{_at_step(self.step)} (judged from step {j.rule.after_step})",
            )
        j.state = RuleStatus.OK
        return None

    def _judge_truncation(self, rec: dict, now: float) -> Verdict | None:
        t = as_number(rec.get("truncated", 0)) or 0.0
        s = as_number(rec.get("samples", 0)) or 0.0
        for j in self._truncation:
            j.truncated += t
            j.samples += s
            if j.samples <= 0 and j.truncated <= 0:
                continue
            frac = j.truncated / j.samples if j.samples > 0 else math.inf
            j.value = frac
            limit = j.rule.max_fraction if j.rule.max_fraction is not None else 0.0  # parser default
            if frac > limit:
                return self._fire(
                    j,
                    "truncated",
                    frac,
                    now,
                    f"{j.truncated:g} of {j.samples:g} inputs truncated ({frac:.2%}), limit {limit:.2%}",
                )
            j.state = RuleStatus.OK
        return None

    def _fire(self, j: _RuleJudge, metric: str | None, value: float, now: float, reason: str) -> Verdict:
        j.state = RuleStatus.FIRED
        j.value = value
        self.verdict = Verdict(
            rule=j.table, kind=j.rule.kind, metric=metric, value=value, step=self.step, at=now, reason=reason
        )
        return self.verdict


def _at_step(step: int | None) -> str:
    """' at step N', or '' when the run reports no step (never 'at step None')."""
    return f" at step {step}" if step is not None else ""
