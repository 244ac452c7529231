"""`campaign report DEST` across hosts, without sshd: each host's folder holds a real ledger and
real run files; DEST is filled as `campaign pull FILE DEST` fills it (the files copied into
`DEST/<host>/`, a `VACUUM INTO` snapshot of each ledger with its paths moved there, the campaign
file in DEST). The report writes REPORT.md like the single-host one, prints it with --markdown,
and its JSON carries every number as a number."""

from __future__ import annotations

import json
import math

from helpers_hosts import pulled
from helpers_report import add_run, make_campaign, open_writable

from runner.cli import main as cli_main


def test_report_across_hosts_writes_report_md_with_hosts_conclusion_and_gpu_warning(tmp_path, capsys):
    dest = pulled(
        tmp_path,
        {
            "a": [dict(variant="control", config_hash="11111111", dev_acc=0.70)],
            "b": [
                dict(variant="rank16", config_hash="22222222", dev_acc=0.75),
                dict(
                    variant="rank64",
                    config_hash="33333333",
                    state="stopped",
                    stop_rule="nonfinite",
                    stop_reason="loss = nan at step 60",
                    stop_value="nan",
                    stop_step=60,
                    checkpoint=False,
                ),
            ],
        },
    )
    assert cli_main(["report", str(dest), "--markdown"]) == 0
    printed = capsys.readouterr().out
    md = (dest / "deliverables" / "REPORT.md").read_text(encoding="utf-8")
    assert printed.strip() == md.strip()
    assert md.startswith("# Closing report: rank-ablation (2 hosts)\n")
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    assert sections == [
        "## Conclusion",
        "## Hosts",
        "## Budget",
        "## Rejected and stopped runs",
        "## Planned against actual",
        "## Decisions",
    ]
    conclusion = md.split("## Conclusion\n\n", 1)[1].split("\n", 1)[0]
    assert conclusion.startswith("rank16 (dev_acc 0.75 vs 0.7, gain +0.05) meets the decision rule")
    assert "> **Warning:** rank16 ran on b (B200) and the control on a (RTX 4090): a comparison across GPU types" in md
    assert "| rank16 | `b` | `rank16-22222222` | 0.75 | 0.7 | +0.05 | yes |" in md
    assert "| `a` | IteraGPU RTX 4090 x1, 3 days | 47.14 USD |" in md
    assert "| `b` | IteraGPU B200 x2, 3 days | 120.00 USD |" in md
    # one rental line per host, their sum, other spending apart, the share over approved (2)
    assert "| committed rental, 2 hosts | 167.14 USD |" in md
    assert "| other spending: dataset transfer | 3.20 USD |" in md
    assert "| approved deliverables (every host) | 2 |" in md
    assert "| rental share per approved deliverable | 83.57 USD |" in md
    assert "- `b/rank64-33333333` (stopped): " in md and "loss = nan at step 60" in md
    host_a = md.split("### Host `a`", 1)[1].split("### Host `b`", 1)[0]
    assert "| control | 10.00 | 1.00 |" in host_a and "| rank16 |" not in host_a  # placed on b: not a's row

    # the JSON says the same
    assert cli_main(["report", str(dest), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["outcome"] == "positive" and data["conclusion"] == conclusion
    assert data["committed_usd"] == 167.14 and data["approved"] == 2
    assert math.isclose(data["usd_per_approved"], 83.57)
    assert [h["host"] for h in data["hosts"]] == ["a", "b"] and all(h["pulled"] for h in data["hosts"])
    assert any("across GPU types" in w for w in data["gpu_warnings"])


def test_nothing_approved_and_a_host_not_pulled_say_so_in_report_md(tmp_path, capsys):
    dest = pulled(
        tmp_path,
        {"a": [dict(variant="control", config_hash="11111111", state="failed", checkpoint=False, files=False)]},
    )
    assert cli_main(["report", str(dest)]) == 0
    capsys.readouterr()
    md = (dest / "deliverables" / "REPORT.md").read_text(encoding="utf-8")
    assert "| `b` | IteraGPU B200 x2, 3 days | 120.00 USD |" in md and "not in this report: no ledger snapshot" in md
    assert (
        "| rental share per approved deliverable | undefined (nothing approved; the rental still cost 167.14 USD) |"
        in md
    )
    assert "| why nothing was approved | a/control-11111111: " in md
    assert md.split("## Conclusion\n\n", 1)[1].startswith("No conclusion: the control 'control' has no approved run")


def test_a_nonfinite_comparison_value_is_null_and_flagged_in_json(tmp_path, capsys):
    dest = pulled(
        tmp_path,
        {
            "a": [dict(variant="control", config_hash="11111111", dev_acc=0.70)],
            "b": [dict(variant="rank16", config_hash="22222222", dev_acc=float("nan"))],
        },
    )
    assert cli_main(["report", str(dest), "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text
    (row,) = [c for c in json.loads(text)["comparisons"] if c["variant"] == "rank16"]
    assert row["value"] is None and row["value_nonfinite"] == "nan" and row["meets"] is False
    assert row["host"] == "b" and row["control_host"] == "a"


def test_one_host_report_json_also_writes_a_nonfinite_comparison_as_null(tmp_path, capsys):
    camp = make_campaign(tmp_path / "camp")
    conn = open_writable(camp)
    add_run(conn, camp, "control", config_hash="11111111", dev_acc=0.70)
    add_run(conn, camp, "rank16", config_hash="22222222", dev_acc=float("inf"))
    conn.close()
    assert cli_main(["report", str(camp.root), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["comparisons"]
    assert row["value"] is None and row["value_nonfinite"] == "inf" and row["gain"] is None
