"""Fuzz run: generated campaign files through the loader (and a sample through `campaign check`
and `campaign plan`), generated metric lines through a live runner. Prints the counts.

    python tests/bench/fuzz_inputs.py [--campaigns 10000] [--lines 100000] [--seed 1]

Passes when no campaign file gives anything but a valid model or a CampaignError naming a field
or line (exit 2 from the CLI), and the runner ingests every metric line (as a record or a counted
bad line) with no traceback in runner.log and still answers at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from runner.campaign.errors import CampaignError  # noqa: E402
from runner.campaign.model import load_campaign, parse_campaign  # noqa: E402
from tests.fuzz_inputs import campaign_text, metric_line, regex_line  # noqa: E402

WRITER = r"""
import os, shutil, sys, time
src = sys.argv[1]
dst = os.path.join(os.environ["CAMPAIGN_RUN_DIR"], "metrics.jsonl")
with open(src, "rb") as f, open(dst, "ab") as out:
    while chunk := f.read(1 << 20):
        out.write(chunk)
        out.flush()
        time.sleep(0.05)
"""
PRINTER = r"""
import sys
for line in open(sys.argv[1], encoding="utf-8"):
    sys.stdout.write(line)
"""


def fuzz_campaigns(n: int, rng: random.Random, tmp: Path) -> dict[str, int]:
    counts = {"campaign files": n, "accepted": 0, "refused with a field or line": 0, "tracebacks": 0}
    path = tmp / "campaign.toml"
    sample = []
    for i in range(n):
        text = campaign_text(rng)
        try:
            parse_campaign(text, path)
            counts["accepted"] += 1
        except CampaignError as exc:
            if exc.field or exc.line or "TOML" in exc.reason:
                counts["refused with a field or line"] += 1
            else:
                counts["tracebacks"] += 1
                print(f"refused without a place: {exc}", file=sys.stderr)
        except Exception as exc:  # the finding this run exists for
            counts["tracebacks"] += 1
            print(f"#{i}: {type(exc).__name__}: {exc}", file=sys.stderr)
        if i % max(1, n // 40) == 0:
            sample.append(text)
    cli_bad = 0
    for text in sample:  # the CLI's exit codes on a sample: 0 or 2, never 1 (a traceback)
        path.write_text(text)
        for cmd in ("check", "plan"):
            res = subprocess.run(
                [sys.executable, "-m", "runner", cmd, str(path)], capture_output=True, text=True, timeout=120
            )
            if res.returncode not in (0, 2) or "Traceback" in res.stderr:
                if not (cmd == "plan" and res.returncode == 1 and "Traceback" not in res.stderr):
                    cli_bad += 1
                    print(f"campaign {cmd}: exit {res.returncode}: {res.stderr[-300:]}", file=sys.stderr)
    counts["CLI runs"] = 2 * len(sample)
    counts["CLI tracebacks"] = cli_bad
    return counts


def fuzz_runner(n: int, rng: random.Random, tmp: Path) -> dict[str, int]:
    from runner.daemon import client, control

    root = tmp / "camp"
    root.mkdir()
    jsonl = root / "lines.jsonl"
    with open(jsonl, "wb") as f:
        for i in range(n):
            f.write(metric_line(rng, i) + b"\n")
    text_lines = root / "lines.txt"
    with open(text_lines, "w", encoding="utf-8") as f:
        for i in range(n // 10):
            f.write(regex_line(rng, i) + "\n")
    (root / "writer.py").write_text(WRITER)
    (root / "printer.py").write_text(PRINTER)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    (root / "campaign.toml").write_text(
        f'[campaign]\nname = "fuzz"\nquestion = "q"\n\n[bundle]\ngpu = "RTX 4090"\ndays = 3\nstarted_at = {started}\n\n'
        f'[[variant]]\nname = "lines"\ncategory = "essential"\ncommand = ["{sys.executable}", "writer.py", "{jsonl}"]\n'
        "hours = 1\n\n"
        f'[[variant]]\nname = "regex"\ncategory = "essential"\ncommand = ["{sys.executable}", "printer.py", "{text_lines}"]\n'
        'hours = 1\nmetrics_regex = "iter (?P<step>\\\\d+): loss (?P<loss>\\\\S+)"\n\n'
        '[[rule]]\nkind = "above"\nmetric = "loss"\nthreshold = 1e9\nvariants = ["regex"]\n'
    )
    c = load_campaign(root)
    os.environ.setdefault("CAMPAIGN_SLOTS", "2")
    control.up(c)
    try:
        for v in ("lines", "regex"):
            client.request(c, "start", variant=v)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            runs = {r["variant"]: r for r in client.request(c, "status")["runs"]}
            if all(r["state"] not in ("queued", "running") for r in runs.values()):
                break
            time.sleep(0.5)
        ping = client.ping(c)
        log = (root / ".campaign" / "runner.log").read_text(errors="replace")
        lines = runs["lines"]
        # the reference: the same bytes decoded at once (blank lines are no line; event lines are
        # records of checkpoints, not metric lines)
        from runner.supervision.metric_stream import decode_lines

        records, garbage = decode_lines(jsonl.read_bytes())
        metric_records = sum(1 for r in records if "event" not in r)
        return {
            "metric lines": n,
            "ingested as records": lines["lines"],
            "counted as bad lines": lines["bad_lines"],
            "lost": abs(metric_records - lines["lines"]) + abs(garbage - lines["bad_lines"]),
            "regex lines": n // 10,
            "runs ended": sum(r["state"] not in ("queued", "running") for r in runs.values()),
            "runner.log tracebacks": log.count("Traceback"),
            "runner answering": int(ping is not None),
        }
    finally:
        control.down(c, abort_runs=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--campaigns", type=int, default=10_000)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        a = fuzz_campaigns(args.campaigns, rng, Path(d))
        t1 = time.monotonic()
        b = fuzz_runner(args.lines, rng, Path(d))
        t2 = time.monotonic()
    for k, v in a.items():
        print(f"{k}: {v}")
    print(f"  ({t1 - t0:.1f} s)")
    for k, v in b.items():
        print(f"{k}: {v}")
    print(f"  ({t2 - t1:.1f} s)")
    bad = a["tracebacks"] + a["CLI tracebacks"] + b["lost"] + b["runner.log tracebacks"] + (1 - b["runner answering"])
    print("fuzz: " + ("no traceback, nothing lost, the runner answering" if not bad else f"{bad} problem(s)"))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
