"""`campaign verify` and `campaign report`: the deliverables checked, and the closing report.

Both read the ledger read-only and refresh the output folder (manifest.toml, RELOAD.md; the report
also leaves REPORT.md there). Exit 0 when verify finds something approved and no finished run
failed its checks, 1 otherwise; the report exits 0 whenever it could be written.
"""

from __future__ import annotations

import argparse
import json
import sys

from campaign_train.atomic import write_text_atomic
from runner.campaign.json_numbers import json_ready
from runner.campaign.model import load_campaign
from runner.cli import file_arg
from runner.closing.deliverables import verify_campaign
from runner.closing.ledger_reads import open_ledger
from runner.closing.manifest import write_output
from runner.closing.report import build_report


def cmd_verify(ns: argparse.Namespace) -> int:
    campaign = load_campaign(file_arg(ns))
    conn = open_ledger(campaign)
    try:
        verification = verify_campaign(campaign, conn)
        manifest = write_output(campaign, verification, conn)
    finally:
        if conn is not None:
            conn.close()
    if ns.json:
        print(json.dumps(json_ready(verification.to_json()), indent=2, allow_nan=False))
        return 0 if verification.ok else 1
    if not verification.checks:
        print("No runs recorded yet: nothing to verify.")
    for c in verification.checks:
        mark = "approved" if c.approved else "NOT approved"
        extra = f" (re-run of {c.duplicate_of}: counted once)" if c.duplicate_of else ""
        print(f"{c.run.id:<24} {c.run.state:<9} {mark}{extra}")
        for p in c.problems:
            print(f"    - {p}")
    print(f"\n{len(verification.distinct_approved)} approved deliverable(s); manifest: {manifest}")
    return 0 if verification.ok else 1


def cmd_report(ns: argparse.Namespace) -> int:
    from runner.cli import fleet_cmds

    if (several := fleet_cmds.user_side(ns)) is not None:  # [[host]] tables: across the pulled hosts
        return fleet_cmds.cmd_report(several, ns)
    campaign = load_campaign(file_arg(ns))
    conn = open_ledger(campaign)
    try:
        report = build_report(campaign, conn)
        write_output(campaign, report.verification, conn, now=report.generated_at)
    finally:
        if conn is not None:
            conn.close()
    markdown = report.to_markdown()
    write_text_atomic(campaign.output_path / "REPORT.md", markdown)
    if ns.json:
        print(json.dumps(json_ready(report.to_json(raw=True)), indent=2, allow_nan=False))
    elif ns.markdown:
        print(markdown)
    else:
        sys.stdout.write(report.to_text())
    return 0
