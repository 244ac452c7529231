"""The answer to the campaign's question, by the rule in `[decision]` fixed before the trial.

Each approved variant's final value of the decision metric is compared with the approved
control's. The conclusion is one sentence: the variants that meet the minimum gain, or a plain
negative result, or why no conclusion is possible (no rule, control not approved, nothing to
compare). Only approved runs count: a stopped run's number is not a result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from runner.campaign.json_numbers import nonfinite_as_text
from runner.campaign.objects import Campaign
from runner.closing.deliverables import RunCheck, Verification, describe_end
from runner.ledger.states import RunState

# Float noise must not turn a gain of exactly min_gain into a miss.
_EPS = 1e-9


@dataclass(frozen=True)
class Comparison:
    variant: str
    run: str
    value: float | None
    control_value: float | None
    gain: float | None  # in the better direction: positive means better than the control
    meets: bool

    def to_json(self, *, raw: bool = False) -> dict[str, Any]:
        """`raw`: non-finite values stay floats (the CLI writes them as null + `<key>_nonfinite`)."""
        row = asdict(self)
        return row if raw else {k: nonfinite_as_text(v) for k, v in row.items()}


@dataclass(frozen=True)
class Answer:
    conclusion: str
    outcome: str  # "positive" | "negative" | "none" (no conclusion possible)
    comparisons: tuple[Comparison, ...]
    control_run: str | None
    control_value: float | None
    winners: tuple[str, ...]


def answer_question(
    campaign: Campaign, verification: Verification, final_value: Callable[[RunCheck, str], float | None]
) -> Answer:
    """Compare the approved variants with the approved control; `final_value(check, metric)`
    gives a run's last reported value of the metric."""
    rule = campaign.decision
    if rule is None:
        return Answer(
            "No conclusion: the campaign file has no [decision] table, so no rule was fixed "
            "before the trial to answer the question.",
            "none",
            (),
            None,
            None,
            (),
        )
    latest = _latest_approved_per_variant(verification)
    control = latest.get(rule.control)
    if control is None:
        why = _why_not_approved(verification, rule.control)
        return Answer(
            f"No conclusion: the control '{rule.control}' has no approved run ({why}), so no "
            "variant can be compared with it.",
            "none",
            (),
            None,
            None,
            (),
        )
    control_value = final_value(control, rule.metric)
    if control_value is None or not math.isfinite(control_value):
        return Answer(
            f"No conclusion: the approved control run {control.run.id} reported no finite "
            f"{rule.metric} (last value: {_fmt(control_value)}).",
            "none",
            (),
            control.run.id,
            control_value,
            (),
        )
    comparisons = []
    for name, check in latest.items():
        if name == rule.control:
            continue
        value = final_value(check, rule.metric)
        gain = None
        if value is not None and math.isfinite(value):
            gain = (value - control_value) if rule.higher_is_better else (control_value - value)
        comparisons.append(
            Comparison(
                variant=name,
                run=check.run.id,
                value=value,
                control_value=control_value,
                gain=gain,
                meets=gain is not None and gain >= rule.min_gain - _EPS,
            )
        )
    comparisons.sort(key=lambda c: _variant_order(campaign, c.variant))
    others = [v.name for v in campaign.variants if v.name != rule.control]
    if not comparisons:
        causes = "; ".join(f"{n}: {_why_not_approved(verification, n)}" for n in others) or "none declared"
        return Answer(
            f"No conclusion: no variant besides the control '{rule.control}' was approved ({causes}).",
            "none",
            (),
            control.run.id,
            control_value,
            (),
        )
    direction = "higher" if rule.higher_is_better else "lower"
    winners = tuple(c.variant for c in comparisons if c.meets)
    if winners:
        parts = [
            f"{c.variant} ({rule.metric} {_fmt(c.value)} vs {_fmt(control_value)}, gain {c.gain:+.4g})"
            for c in comparisons
            if c.meets
        ]
        verb = "meets" if len(winners) == 1 else "meet"
        sentence = (
            f"{_join(parts)} {verb} the decision rule: {direction} {rule.metric} than the control "
            f"'{rule.control}' by at least {rule.min_gain:g}."
        )
        return Answer(sentence, "positive", tuple(comparisons), control.run.id, control_value, winners)
    scored = [(c.gain, c.variant) for c in comparisons if c.gain is not None]
    best = max(scored) if scored else None
    best_txt = f" (best: {best[1]}, gain {best[0]:+.4g})" if best else ""
    untested = [n for n in others if n not in latest]
    missing = f"; not approved, so not compared: {', '.join(untested)}" if untested else ""
    return Answer(
        f"Negative result: no approved variant beats the control '{rule.control}' by the minimum "
        f"gain of {rule.min_gain:g} in {rule.metric} ({direction} is better){best_txt}{missing}.",
        "negative",
        tuple(comparisons),
        control.run.id,
        control_value,
        (),
    )


def _latest_approved_per_variant(verification: Verification) -> dict[str, RunCheck]:
    """The most recent approved run of each variant (runs are in launch order)."""
    out: dict[str, RunCheck] = {}
    for check in verification.approved:
        out[check.run.variant] = check
    return out


def _why_not_approved(verification: Verification, variant: str) -> str:
    checks = [c for c in verification.checks if c.run.variant == variant]
    if not checks:
        return "it never ran"
    last = checks[-1]
    if last.run.state != RunState.FINISHED:
        return f"{last.run.id} {describe_end(last.run)}"
    return f"{last.run.id}: " + "; ".join(last.problems)


def _variant_order(campaign: Campaign, name: str) -> int:
    for i, v in enumerate(campaign.variants):
        if v.name == name:
            return i
    return len(campaign.variants)


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
