"""The closing report: what the money bought, built once and rendered as JSON, text or Markdown.

Order: the conclusion first, then the committed plan and its price, other spending on its
own lines, the approved count and the rental share per approved deliverable (undefined, with the
committed cost and the causes, when nothing is approved), every rejected or stopped run with its
reason, planned against actual per item with the difference explained, and the decisions taken.

`build_report(campaign)` reads the ledger read-only and verifies the deliverables (final artifacts
reload in child processes); the console renders the same `Report` on its report screen.
"""

from __future__ import annotations

import json
import math
import sqlite3
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any

from runner.campaign.budget import BudgetSummary, budget_summary
from runner.campaign.json_numbers import nonfinite_as_text
from runner.campaign.objects import Campaign
from runner.closing.decision import Answer, answer_question
from runner.closing.deliverables import (
    RunCheck,
    Verification,
    describe_end,
    verify_campaign,
)
from runner.closing.ledger_reads import final_metric, ledger_for
from runner.closing.pilot import all_decisions, frozen_plan, plan_snapshot
from runner.closing.planned_actual import current_attempts, planned_vs_actual, when_utc
from runner.ledger.states import PENDING_STATES, RunState


@dataclass
class Report:
    campaign: Campaign
    generated_at: float
    answer: Answer
    budget: BudgetSummary
    verification: Verification
    rejected: list[dict[str, Any]]
    not_counted: list[dict[str, Any]]
    pending: list[dict[str, Any]]
    planned_vs_actual: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    plan: dict[str, Any]
    plan_is_frozen: bool
    metric_values: dict[str, float | None] = field(default_factory=dict)

    @property
    def approved(self) -> int:
        return self.budget.approved

    # -- JSON ---------------------------------------------------------------------------------
    def to_json(self, *, raw: bool = False) -> dict[str, Any]:
        """The documented `report --json` keys first, then the detail behind them. Non-finite
        numbers read "nan"/"inf"/"-inf" (the console's form) unless `raw`: then they stay floats,
        for `json_ready` to write as null + `<key>_nonfinite` (what scripts read)."""
        b = self.budget.to_json()
        data = {
            "conclusion": self.answer.conclusion,
            "outcome": self.answer.outcome,
            "committed_usd": b["committed_usd"],
            "other_spend_usd": b["other_spend_usd"],
            "approved": self.approved,
            "usd_per_approved": b["usd_per_approved"],
            "rejected": [
                {"run": r["run"], "reason": r["reason"], "variant": r["variant"], "state": r["state"]}
                for r in self.rejected
            ],
            "planned_vs_actual": self.planned_vs_actual,
            "comparisons": [c.to_json(raw=True) for c in self.answer.comparisons],
            "campaign": self.campaign.name,
            "question": self.campaign.question,
            "generated_at": self.generated_at,
            "plan": b["plan"],
            "price_source": b["price_source"],
            "other_spend": b["other_spend"],
            "approved_runs": [{"run": c.run.id, "variant": c.run.variant} for c in self.verification.distinct_approved],
            "not_counted": self.not_counted,
            "pending": self.pending,
            "decisions": [
                {k: d.get(k) for k in ("t", "who", "how", "choice", "variants", "dropped", "note")}
                for d in self.decisions
            ],
            "plan_frozen": self.plan_is_frozen,
            "committed_hours": self.plan.get("committed_hours"),
            "window_hours": self.plan.get("window_hours"),
            "verify_ok": self.verification.ok,
        }
        return data if raw else nonfinite_as_text(data)

    # -- text ---------------------------------------------------------------------------------
    def to_text(self, width: int = 80) -> str:
        lines = [
            f"Closing report: {self.campaign.name}",
            *_wrap(f"Question: {self.campaign.question}", width, "", "  "),
            "",
        ]
        lines += ["Conclusion", *_wrap(self.answer.conclusion, width, "  "), ""]
        if self.answer.comparisons:
            lines += _text_table(
                ["variant", "run", "value", "control", "gain", "meets"],
                [_comparison_row(c) for c in self.answer.comparisons],
                width,
            )
            lines.append("")
        lines.append("Budget")
        lines += _text_table(None, [[label, value] for label, value in self.budget_lines()], width)
        lines.append("")
        lines.append("Rejected and stopped runs")
        if self.rejected:
            for r in self.rejected:
                lines += _wrap(f"{r['run']}: {r['reason']}", width, "  - ", "    ")
        else:
            lines.append("  none")
        for r in self.not_counted:
            lines += _wrap(f"{r['run']}: approved, {r['reason']}", width, "  - ", "    ")
        lines.append("")
        lines.append("Planned against actual (hours)")
        lines += _text_table(
            ["item", "planned", "actual", "diff", "note"], [_pva_row(r) for r in self.planned_vs_actual], width
        )
        lines.append("")
        lines.append("Decisions")
        lines += [f"  - {d}" for d in self.decision_lines()] or ["  none recorded"]
        return "\n".join(lines) + "\n"

    # -- Markdown -----------------------------------------------------------------------------
    def to_markdown(self) -> str:
        out = [
            f"# Closing report: {self.campaign.name}",
            "",
            f"**Question:** {self.campaign.question}",
            "",
            "## Conclusion",
            "",
            self.answer.conclusion,
            "",
        ]
        d = self.campaign.decision
        if self.answer.comparisons and d is not None:
            out.append(
                f"Decision rule, fixed before the trial: {d.metric}, "
                f"{'higher' if d.higher_is_better else 'lower'} is better, minimum gain {d.min_gain:g} "
                f"over the control `{d.control}` (run `{self.answer.control_run}`)."
            )
            out.append("")
            out += _md_table(
                ["variant", "run", "value", "control", "gain", "meets"],
                [_comparison_row(c, code=True) for c in self.answer.comparisons],
            )
            out.append("")
        out += ["## Budget", ""]
        out += _md_table(["", "amount"], [[label, value] for label, value in self.budget_lines()])
        out += ["", "## Rejected and stopped runs", ""]
        if self.rejected:
            out += [f"- `{r['run']}` ({r['state']}): {r['reason']}" for r in self.rejected]
        else:
            out.append("None.")
        out += [f"- `{r['run']}`: approved, {r['reason']}" for r in self.not_counted]
        out += ["", "## Planned against actual", ""]
        if not self.plan_is_frozen:
            out += ["_The runner never froze a plan: planned hours come from today's campaign file._", ""]
        out += _md_table(
            ["item", "planned h", "actual h", "difference", "explanation"],
            [_pva_row(r) for r in self.planned_vs_actual],
        )
        out += ["", "## Decisions", ""]
        out += [f"- {d}" for d in self.decision_lines()] or ["None recorded."]
        out += [
            "",
            f"_Generated {when_utc(self.generated_at)}; every approved run's final artifact was reloaded "
            "in a new process._",
            "",
        ]
        return "\n".join(out)

    # -- shared pieces ------------------------------------------------------------------------
    def budget_lines(self) -> list[tuple[str, str]]:
        rows = self.budget.lines()
        if self.approved == 0:
            causes = "; ".join(f"{r['run']}: {r['reason']}" for r in self.rejected) or "no run was recorded"
            rows.append(("why nothing was approved", causes))
        return rows

    def decision_lines(self) -> list[str]:
        out = []
        for d in self.decisions:
            out.append(f"{when_utc(d['t'])}, {d['who']}: {decision_words(d)}")
        return out


# ---------------------------------------------------------------------------------------------


def decision_words(d: dict[str, Any]) -> str:
    """A decision in the same words wherever it is shown (report, `campaign status`)."""
    what = str(d.get("choice")) + (f" to {', '.join(d.get('variants') or [])}" if d.get("choice") == "cut" else "")
    if d.get("dropped"):
        what += f" (dropped {', '.join(d['dropped'])})"
    return what + (f": {d['note']}" if d.get("note") else "")


def build_report(
    campaign: Campaign,
    conn: sqlite3.Connection | None = None,
    *,
    verification: Verification | None = None,
    now: float | None = None,
) -> Report:
    """Everything the closing report says, from the ledger (read-only) and the run folders."""
    now = time.time() if now is None else now
    with ledger_for(campaign, conn) as conn:
        if verification is None:
            verification = verify_campaign(campaign, conn)
        values: dict[str, float | None] = {}

        def value_of(check: RunCheck, metric: str) -> float | None:
            values[check.run.id] = final_metric(conn, check.run, metric)
            return values[check.run.id]

        answer = answer_question(campaign, verification, value_of)
        plan = frozen_plan(conn) if conn is not None else None
        is_frozen = plan is not None
        if plan is None:
            plan = plan_snapshot(campaign, now)
        decisions = all_decisions(conn) if conn is not None else []
        elapsed = current_attempts(conn, verification, now)
    rejected, pending, not_counted = [], [], []
    for c in verification.checks:
        if c.approved:
            if c.duplicate_of:
                not_counted.append(
                    {
                        "run": c.run.id,
                        "variant": c.run.variant,
                        "reason": f"re-run of the same configuration as {c.duplicate_of}: counted once",
                    }
                )
        elif c.run.state in PENDING_STATES:
            pending.append({"run": c.run.id, "variant": c.run.variant, "state": c.run.state})
        else:
            rejected.append(
                {"run": c.run.id, "variant": c.run.variant, "state": c.run.state, "reason": rejection_reason(c)}
            )
    budget = budget_summary(campaign, len(verification.distinct_approved))
    rows = planned_vs_actual(campaign, plan, verification, decisions, elapsed)
    return Report(
        campaign=campaign,
        generated_at=now,
        answer=answer,
        budget=budget,
        verification=verification,
        rejected=rejected,
        not_counted=not_counted,
        pending=pending,
        planned_vs_actual=rows,
        decisions=decisions,
        plan=plan,
        plan_is_frozen=is_frozen,
        metric_values=values,
    )


def rejection_reason(check: RunCheck) -> str:
    if check.run.state != RunState.FINISHED:
        words = describe_end(check.run)
        if check.run.cut_by_decision and "pilot decision" not in words:
            words += "; cut at the pilot decision"
        return words
    return "; ".join(check.problems)


# ---------------------------------------------------------------------------------------------
# Formatting helpers


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def _hours(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    # a CPU demo's runs last minutes: keep two significant digits below a tenth of an hour
    digits = 2 if abs(value) >= 0.1 or value == 0 else 3
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _comparison_row(c, code: bool = False) -> list[str]:
    run = f"`{c.run}`" if code else c.run
    return [
        c.variant,
        run,
        _fmt(c.value),
        _fmt(c.control_value),
        "-" if c.gain is None else f"{c.gain:+.4g}",
        "yes" if c.meets else "no",
    ]


def _pva_row(r: dict[str, Any]) -> list[str]:
    return [
        r["name"],
        _hours(r["planned_hours"]),
        _hours(r["actual_hours"]),
        _hours(r["difference_hours"], signed=True),
        r["note"],
    ]


def _wrap(text: str, width: int, first: str, rest: str | None = None) -> list[str]:
    return textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=rest if rest is not None else first
    ) or [first.rstrip()]


def _text_table(headers: list[str] | None, rows: list[list[str]], width: int = 80) -> list[str]:
    """Columns padded to their widest cell; the last column wraps under itself to fit `width`."""
    table = ([headers] if headers else []) + rows
    if not table:
        return []
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]) - 1)]
    indent = 2 + sum(w + 2 for w in widths)
    free = max(width - indent, 24)
    out = []
    for cells in table:
        head = "".join(str(c).ljust(w) + "  " for c, w in zip(cells[:-1], widths))
        wrapped = textwrap.wrap(str(cells[-1]), free) or [""]
        out.append(("  " + head + wrapped[0]).rstrip())
        out += [" " * indent + more for more in wrapped[1:]]
    return out


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def esc(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return out


def dumps(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2)
