"""The closing report of a campaign over several hosts, from what `campaign pull` brought back.

Each host's files are in `ROOT/<host>/` and a consistent snapshot of its ledger in
`ROOT/.campaign/hosts/<host>.ledger.sqlite`. Each host is verified and reported as on its own
(its bundle, its plan), then the runs of every host are judged together: one decision, with the
control on one host and a variant on another; the bundles are summed (the other spending counted
once); approved deliverables are counted across hosts; planned against actual stays per host;
a comparison between runs on different GPU types is flagged.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.campaign.budget import UNDEFINED, cost_per_approved, format_usd
from runner.campaign.host_plan import placement
from runner.campaign.hosts import host_named, on_host, total_price_usd
from runner.campaign.model import CAMPAIGN_FILE
from runner.campaign.objects import Campaign
from runner.closing.decision import Answer, answer_question
from runner.closing.deliverables import RunCheck, Verification
from runner.closing.ledger_reads import final_metric
from runner.closing.planned_actual import when_utc
from runner.closing.report import Report, _comparison_row, _md_table, _pva_row, build_report
from runner.ledger import store as L


def host_ledger(root: Path, host: str) -> Path:
    """Where `campaign pull` leaves host `host`'s ledger snapshot under the folder `root`."""
    return root / ".campaign" / "hosts" / f"{host}.ledger.sqlite"


@dataclass
class HostsReport:
    campaign: Campaign
    generated_at: float
    reports: dict[str, Report]  # per host that was pulled
    missing: dict[str, str]  # host -> why it is not in the report
    answer: Answer
    host_of_run: dict[int, str]  # id(RunCheck) -> host
    verification: Verification
    gpu_flags: list[str] = field(default_factory=list)

    @property
    def approved(self) -> int:
        return sum(len(r.verification.distinct_approved) for r in self.reports.values())

    @property
    def committed_usd(self) -> float:
        return total_price_usd(self.campaign)

    @property
    def other_spend_usd(self) -> float:
        return round(sum(s.usd for s in self.campaign.spend), 2)

    def _host(self, run_id: str) -> str | None:
        for check in self.verification.checks:
            if check.run.id == run_id:
                return self.host_of_run.get(id(check))
        return None

    @property
    def usd_per_approved(self) -> float | None:
        """The rental share per approved deliverable, as on one host: every bundle over the
        approved count (other spending stays on its own lines); None when nothing is approved."""
        return cost_per_approved(self.committed_usd, self.approved)

    def to_json(self) -> dict[str, Any]:
        """`report --json` across hosts. Non-finite numbers stay floats: the CLI writes them as
        null + `<key>_nonfinite` (`json_ready`)."""
        comparisons = []
        for c in self.answer.comparisons:
            row = c.to_json(raw=True)
            row["host"] = self._host(c.run)
            row["control_host"] = self._host(self.answer.control_run or "")
            comparisons.append(row)
        return {
            "conclusion": self.answer.conclusion,
            "outcome": self.answer.outcome,
            "committed_usd": self.committed_usd,
            "other_spend_usd": self.other_spend_usd,
            "approved": self.approved,
            "usd_per_approved": self.usd_per_approved,
            "rejected": [{**r, "host": h} for h, rep in self.reports.items() for r in rep.rejected],
            "planned_vs_actual": [{**r, "host": h} for h, rep in self.reports.items() for r in rep.planned_vs_actual],
            "comparisons": comparisons,
            "gpu_warnings": self.gpu_flags,
            "hosts": [
                {
                    "host": h.name,
                    "gpu": h.bundle.gpu,
                    "days": h.bundle.days,
                    "price_usd": h.bundle.price_usd,
                    "pulled": h.name in self.reports,
                    "approved": len(self.reports[h.name].verification.distinct_approved)
                    if h.name in self.reports
                    else None,
                    "missing": self.missing.get(h.name),
                }
                for h in self.campaign.hosts
            ],
            "campaign": self.campaign.name,
            "question": self.campaign.question,
            "generated_at": self.generated_at,
        }

    def to_text(self) -> str:
        data = self.to_json()
        lines = [f"Closing report: {self.campaign.name} ({len(self.campaign.hosts)} hosts)"]
        lines.append(f"Question: {self.campaign.question}")
        lines.append(f"Conclusion: {self.answer.conclusion}")
        for flag in self.gpu_flags:
            lines.append(f"WARNING: {flag}")
        for h in data["hosts"]:
            got = f"{h['approved']} approved" if h["pulled"] else f"NOT in this report: {h['missing']}"
            lines.append(f"  host {h['host']}: {h['gpu']}, {h['days']} days, {h['price_usd']:.2f} USD; {got}")
        per = data["usd_per_approved"]
        lines.append(
            f"Bundles {data['committed_usd']:.2f} USD + other spending {data['other_spend_usd']:.2f} USD; "
            f"{data['approved']} approved deliverable(s)"
            + (f", rental share {per:.2f} USD each" if per is not None else ", none approved (share undefined)")
        )
        lines.append("Planned vs actual (per host):")
        for r in data["planned_vs_actual"]:
            actual = "-" if r.get("actual_hours") is None else f"{r['actual_hours']:.2f}"
            lines.append(
                f"  {r['host']:<8} {r['name']:<28} planned {r.get('planned_hours') or 0:.2f} h, actual {actual} h"
                + (f"  {r['note']}" if r.get("note") else "")
            )
        for r in data["rejected"]:
            lines.append(f"  rejected {r['host']}/{r['run']}: {r['reason']}")
        return "\n".join(lines) + "\n"

    # -- Markdown (REPORT.md), in the single-host report's style ----------------------------------
    def to_markdown(self) -> str:
        c = self.campaign
        out = [f"# Closing report: {c.name} ({len(c.hosts)} hosts)", "", f"**Question:** {c.question}", ""]
        out += ["## Conclusion", "", self.answer.conclusion, ""]
        for flag in self.gpu_flags:  # each comparison across GPU types, said before the numbers
            out += [f"> **Warning:** {flag}", ""]
        d = c.decision
        if self.answer.comparisons and d is not None:
            control_host = self._host(self.answer.control_run or "")
            out.append(
                f"Decision rule, fixed before the trial: {d.metric}, "
                f"{'higher' if d.higher_is_better else 'lower'} is better, minimum gain {d.min_gain:g} "
                f"over the control `{d.control}` (run `{self.answer.control_run}` on host `{control_host}`)."
            )
            out.append("")
            rows = []
            for comp in self.answer.comparisons:
                row = _comparison_row(comp, code=True)
                rows.append([row[0], f"`{self._host(comp.run)}`", *row[1:]])
            out += _md_table(["variant", "host", "run", "value", "control", "gain", "meets"], rows)
            out.append("")
        out += ["## Hosts", ""]
        host_rows = []
        for h in c.hosts:
            b, rep = h.bundle, self.reports.get(h.name)
            got = str(len(rep.verification.distinct_approved)) if rep else f"not in this report: {self.missing[h.name]}"
            host_rows.append(
                [
                    f"`{h.name}`",
                    f"{b.provider} {b.gpu} x{b.gpus}, {b.days} days",
                    format_usd(b.price_usd),
                    when_utc(b.started_at.timestamp()),
                    when_utc(b.expires_at.timestamp()),
                    got,
                ]
            )
        out += _md_table(["host", "bundle", "price", "opened", "expires", "approved"], host_rows)
        out += ["", "## Budget", ""]
        out += _md_table(["", "amount"], [[label, value] for label, value in self.budget_lines()])
        out += ["", "## Rejected and stopped runs", ""]
        rejected = [(h, r) for h, rep in self.reports.items() for r in rep.rejected]
        if rejected:
            out += [f"- `{h}/{r['run']}` ({r['state']}): {r['reason']}" for h, r in rejected]
        else:
            out.append("None.")
        out += [
            f"- `{h}/{r['run']}`: approved, {r['reason']}" for h, rep in self.reports.items() for r in rep.not_counted
        ]
        out += ["", "## Planned against actual", ""]
        for name, rep in self.reports.items():
            out += [f"### Host `{name}`", ""]
            if not rep.plan_is_frozen:
                out += ["_Its runner never froze a plan: planned hours come from today's campaign file._", ""]
            out += _md_table(
                ["item", "planned h", "actual h", "difference", "explanation"],
                [_pva_row(r) for r in rep.planned_vs_actual],
            )
            out.append("")
        if not self.reports:
            out += ["No host was pulled.", ""]
        out += ["## Decisions", ""]
        decided = [f"- host `{h}`: {line}" for h, rep in self.reports.items() for line in rep.decision_lines()]
        out += decided or ["None recorded."]
        out += [
            "",
            f"_Generated {when_utc(self.generated_at)} from the copies `campaign pull` brought back; every "
            "approved run's final artifact was reloaded in a new process._",
            "",
        ]
        return "\n".join(out)

    def budget_lines(self) -> list[tuple[str, str]]:
        """The single-host budget's rows, with one rental line per host and their sum."""
        rows = []
        for h in self.campaign.hosts:
            b = h.bundle
            source = "catalog" if b.price_from_catalog else "campaign file (price_usd)"
            rows.append(
                (
                    f"committed rental, host {h.name} ({b.provider} {b.gpu}, {b.days} days, {source})",
                    format_usd(b.price_usd),
                )
            )
        rows.append((f"committed rental, {len(self.campaign.hosts)} hosts", format_usd(self.committed_usd)))
        rows += [(f"other spending: {s.what}", format_usd(s.usd)) for s in self.campaign.spend]
        if not self.campaign.spend:
            rows.append(("other spending", "none recorded"))
        rows.append(("approved deliverables (every host)", str(self.approved)))
        if self.approved:
            rows.append(("rental share per approved deliverable", format_usd(self.usd_per_approved)))
        else:
            causes = (
                "; ".join(f"{h}/{r['run']}: {r['reason']}" for h, rep in self.reports.items() for r in rep.rejected)
                or "no run was recorded"
            )
            rows.append(
                (
                    "rental share per approved deliverable",
                    f"{UNDEFINED} (nothing approved; the rental still cost {format_usd(self.committed_usd)})",
                )
            )
            rows.append(("why nothing was approved", causes))
        return rows


def build_hosts_report(campaign: Campaign, root: Path | None = None, now: float | None = None) -> HostsReport:
    """The report across hosts from the pulled copies under `root` (default: the campaign folder)."""
    root = campaign.root if root is None else root
    now = time.time() if now is None else now
    reports: dict[str, Report] = {}
    missing: dict[str, str] = {}
    conns: dict[int, sqlite3.Connection] = {}
    host_of_run: dict[int, str] = {}
    opened: list[sqlite3.Connection] = []
    where = placement(campaign)
    try:
        for h in campaign.hosts:
            path = host_ledger(root, h.name)
            if not path.exists():
                missing[h.name] = f"no ledger snapshot at {path}: run `campaign pull {campaign.path}` first"
                continue
            view = dataclasses.replace(on_host(campaign, h.name), path=root / h.name / CAMPAIGN_FILE)
            conn = L.connect(path, readonly=True)
            opened.append(conn)
            rep = build_report(view, conn, now=now)
            rep.planned_vs_actual = [r for r in rep.planned_vs_actual if not _elsewhere(r, h.name, where)]
            reports[h.name] = rep
            for check in rep.verification.checks:
                conns[id(check)] = conn
                host_of_run[id(check)] = h.name
        checks: list[RunCheck] = [c for rep in reports.values() for c in rep.verification.checks]
        checks.sort(key=lambda c: (c.run.launched_at is None, c.run.launched_at or 0.0))
        merged = Verification(checks=checks)

        def value_of(check: RunCheck, metric: str) -> float | None:
            return final_metric(conns.get(id(check)), check.run, metric)

        answer = answer_question(campaign, merged, value_of)
    finally:
        for conn in opened:
            conn.close()
    report = HostsReport(campaign, now, reports, missing, answer, host_of_run, merged)
    report.gpu_flags = _gpu_flags(report)
    if missing and answer.outcome != "none":
        report.gpu_flags.append(f"hosts not pulled, their runs not judged: {', '.join(missing)}")
    return report


def _elsewhere(row: dict[str, Any], host: str, where: dict[str, str]) -> bool:
    """A planned variant this host never ran because it is placed on another host: not its row."""
    return row.get("kind") == "variant" and where.get(row["name"], host) != host and row.get("actual_hours") is None


def _gpu_flags(report: HostsReport) -> list[str]:
    """A comparison between runs on different GPU types says so: speed, numerics and memory
    differ, so the gain may be the hardware's."""
    out: list[str] = []
    control_host = report._host(report.answer.control_run or "")
    if control_host is None:
        return out
    control_gpu = host_named(report.campaign, control_host).bundle.gpu
    for c in report.answer.comparisons:
        host = report._host(c.run)
        if host is None:
            continue
        gpu = host_named(report.campaign, host).bundle.gpu
        if gpu != control_gpu:
            out.append(
                f"{c.variant} ran on {host} ({gpu}) and the control on {control_host} ({control_gpu}): "
                "a comparison across GPU types"
            )
    return out
