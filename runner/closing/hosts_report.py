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

from runner.campaign.hosts import host_named, on_host, total_price_usd
from runner.campaign.model import CAMPAIGN_FILE
from runner.campaign.objects import Campaign
from runner.closing.decision import Answer, answer_question
from runner.closing.deliverables import RunCheck, Verification
from runner.closing.ledger_reads import final_metric
from runner.closing.report import Report, build_report
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

    def to_json(self) -> dict[str, Any]:
        total = round(self.committed_usd + self.other_spend_usd, 2)
        comparisons = []
        for c in self.answer.comparisons:
            row = c.to_json()
            row["host"] = self._host(c.run)
            row["control_host"] = self._host(self.answer.control_run or "")
            comparisons.append(row)
        return {
            "conclusion": self.answer.conclusion,
            "outcome": self.answer.outcome,
            "committed_usd": self.committed_usd,
            "other_spend_usd": self.other_spend_usd,
            "approved": self.approved,
            "usd_per_approved": round(total / self.approved, 2) if self.approved else None,
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
            + (f", {per:.2f} USD each" if per is not None else ", none approved")
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


def build_hosts_report(campaign: Campaign, root: Path | None = None, now: float | None = None) -> HostsReport:
    """The report across hosts from the pulled copies under `root` (default: the campaign folder)."""
    root = campaign.root if root is None else root
    now = time.time() if now is None else now
    reports: dict[str, Report] = {}
    missing: dict[str, str] = {}
    conns: dict[int, sqlite3.Connection] = {}
    host_of_run: dict[int, str] = {}
    opened: list[sqlite3.Connection] = []
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
