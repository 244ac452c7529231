"""Metric lines ingested per second when catching up on a long `metrics.jsonl`.

Writes N lines (default 2,000,000) in the harness's format, one in 10,000 with a `NaN` loss and one
in 100,000 garbage, then reads the whole file through `MetricStream` (msgspec's line decoder, the
stdlib for the lines it refuses) and through the same reader on the stdlib `json` only, and prints
lines/s for each and the ratio.

    python tests/bench/bench_ingest.py [--lines 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from runner.supervision import metric_stream
from runner.supervision.metric_stream import MetricStream, decode_lines_stdlib


def write_file(path: Path, n: int) -> int:
    rnd = random.Random(1)
    t = 1764406800.0
    chunk = []
    with open(path, "w") as f:
        for i in range(n):
            if i % 100_000 == 99_999:
                chunk.append("this line is garbage {")
                continue
            t += 0.01
            loss = "NaN" if i % 10_000 == 9_999 else f"{rnd.uniform(0.5, 3):.6f}"
            chunk.append(
                f'{{"t": {t:.3f}, "step": {i}, "loss": {loss}, "dev_acc": {rnd.random():.4f}, '
                f'"truncated": 0, "samples": 64}}'
            )
            if len(chunk) >= 10_000:
                f.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            f.write("\n".join(chunk) + "\n")
    return path.stat().st_size


def catch_up(path: Path) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    s = MetricStream(path)
    n = 0
    for batch in s.iter_batches():
        n += len(batch)
    dt = time.perf_counter() - t0
    s.close()
    return dt, n, s.garbage


def raw_msgspec(path: Path, repeat: int) -> float:
    """This host's ceiling: msgspec on the same lines without NaN or garbage, no file reading."""
    import msgspec

    data = path.read_bytes()
    clean = b"\n".join(ln for ln in data.split(b"\n") if ln.startswith(b"{") and b"NaN" not in ln) + b"\n"
    n = clean.count(b"\n")
    dec = msgspec.json.Decoder()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in range(0, len(clean), 8 << 20):
            j = clean.find(b"\n", min(len(clean) - 1, i + (8 << 20) - 1))
            dec.decode_lines(clean[clean.rfind(b"\n", 0, i) + 1 if i else 0 : j + 1])
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        size = write_file(path, args.lines)
        print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {args.lines:,} lines, {size / 1e6:.0f} MB")
        fast = min(catch_up(path) for _ in range(args.repeat))
        real = metric_stream.decode_lines
        metric_stream.decode_lines = decode_lines_stdlib  # the same reader, stdlib decoding
        try:
            slow = min(catch_up(path) for _ in range(args.repeat))
        finally:
            metric_stream.decode_lines = real
        assert fast[1] == slow[1] and fast[2] == slow[2], (fast, slow)
        ceiling = raw_msgspec(path, args.repeat)
        for label, (dt, n, bad) in (("msgspec", fast), ("stdlib json", slow)):
            print(
                f"  {label:12s} {n / dt:12,.0f} lines/s  ({n:,} records, {bad} garbage, {dt:.2f} s, "
                f"best of {args.repeat})"
            )
        print(f"  ratio msgspec / stdlib: {slow[0] / fast[0]:.1f}x")
        print(f"  for scale, msgspec decode_lines alone on the clean lines, in memory: {ceiling:,.0f} lines/s")


if __name__ == "__main__":
    main()
