"""`campaign report DEST` across hosts, without sshd: each host's folder holds a real ledger and
real run files; DEST is filled as `campaign pull FILE DEST` fills it (the files copied into
`DEST/<host>/`, a `VACUUM INTO` snapshot of each ledger with its paths moved there, the campaign
file in DEST). The report writes REPORT.md like the single-host one, prints it with --markdown,
and its JSON carries every number as a number."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

from helpers_report import CAMPAIGN_TOML, DECISION, VARIANT, add_run, make_campaign, open_writable

from runner.campaign.hosts import on_host
from runner.campaign.model import CAMPAIGN_FILE, load_campaign
from runner.cli import main as cli_main
from runner.closing.hosts_report import host_ledger
from runner.ledger.snapshot import rebase_paths, snapshot

HOSTS = """
[[host]]
name = "a"
ssh = "gpu-a"
dir = "/srv/camp"

[[host]]
name = "b"
ssh = "root@203.0.113.7"
dir = "/srv/camp"
gpu = "B200"
price_usd = 120.0
"""


def campaign_text() -> str:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 6 * 3600))
    variants = (("control", "a"), ("rank16", "b"), ("rank64", "b"))
    tables = "".join(VARIANT.format(name=n, category="essential", hours=10, extra=f'host = "{h}"') for n, h in variants)
    text = CAMPAIGN_TOML.format(
        started=started,
        variants=", ".join(f'"{n}"' for n, _ in variants),
        variant_tables=tables,
        decision=DECISION,
    )
    return text + HOSTS


def pulled(tmp_path: Path, runs: dict[str, list[dict]]) -> Path:
    """DEST as `campaign pull FILE DEST` leaves it, from host folders with real ledgers."""
    text = campaign_text()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / CAMPAIGN_FILE).write_text(text, encoding="utf-8")
    for host, host_runs in runs.items():
        there = tmp_path / "hosts" / host  # the host's own campaign folder
        there.mkdir(parents=True)
        (there / CAMPAIGN_FILE).write_text(text, encoding="utf-8")
        camp = on_host(load_campaign(there), host)
        conn = open_writable(camp)
        for kw in host_runs:
            add_run(conn, camp, **kw)
        conn.close()
        shutil.copytree(there / "runs", dest / host / "runs")
        copy = snapshot(camp.state_dir / "ledger.sqlite", host_ledger(dest, host))
        rebase_paths(copy, str(there), str((dest / host).resolve()))
        shutil.rmtree(there)  # the host is gone: only the pulled copies remain
    return dest


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
