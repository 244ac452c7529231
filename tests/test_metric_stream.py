"""The incremental metrics reader on real files: partial lines, garbage, restarts, NaN tokens."""

import json
import math
import os

from runner.supervision.line_parsers import RegexMetrics
from runner.supervision.metric_stream import MetricStream, decode_lines, decode_lines_stdlib


def append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


def test_missing_file_then_lines_as_they_come(tmp_path):
    p = tmp_path / "metrics.jsonl"
    s = MetricStream(p)
    assert s.poll() == []
    append(p, b'{"t": 1.0, "step": 1, "loss": 2.5}\n')
    assert s.poll() == [{"t": 1.0, "step": 1, "loss": 2.5}]
    assert s.poll() == []
    assert s.lines == 1 and s.offset == p.stat().st_size
    s.close()


def test_partial_last_line_waits_for_its_newline(tmp_path):
    p = tmp_path / "metrics.jsonl"
    s = MetricStream(p)
    append(p, b'{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    assert s.poll() == [{"step": 1, "loss": 1.0}]
    assert s.poll() == []
    append(p, b'ss": 0.5}')
    assert s.poll() == []
    append(p, b"\n")
    assert s.poll() == [{"step": 2, "loss": 0.5}]
    assert s.garbage == 0
    s.close()


def test_garbage_lines_are_skipped_and_counted(tmp_path):
    p = tmp_path / "metrics.jsonl"
    append(p, b'{"step": 1}\nnot json\n[1, 2]\n\n\xff\xfe\n{"step": 2, "loss": NaN}\n{"step": 3}\n')
    s = MetricStream(p)
    recs = s.poll()
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert math.isnan(recs[1]["loss"])
    assert s.garbage == 3 and s.lines == 3
    s.close()


def test_nonfinite_tokens_as_python_writes_them(tmp_path):
    p = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": i, "loss": v}) for i, v in enumerate([1.0, float("nan"), float("inf"), float("-inf")])]
    append(p, ("\n".join(lines) + "\n").encode())
    with MetricStream(p) as s:
        losses = [r["loss"] for r in s.poll()]
    assert losses[0] == 1.0 and math.isnan(losses[1]) and losses[2] == math.inf and losses[3] == -math.inf


def test_truncated_file_is_read_again_from_its_start(tmp_path):
    p = tmp_path / "metrics.jsonl"
    append(p, b'{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    s = MetricStream(p)
    assert len(s.poll()) == 3
    with open(p, "wb") as f:
        f.write(b'{"step": 1, "again": 1}\n')
    assert s.poll() == [{"step": 1, "again": 1}]
    assert s.restarts == 1
    s.close()


def test_replaced_file_is_followed(tmp_path):
    p = tmp_path / "metrics.jsonl"
    append(p, b'{"step": 1}\n')
    s = MetricStream(p)
    assert len(s.poll()) == 1
    append(p, b'{"step": 2}\n')  # written to the old file before the swap
    new = tmp_path / "new.jsonl"
    new.write_bytes(b'{"step": 10}\n{"step": 11}\n{"step": 12}\n')
    os.replace(new, p)
    assert [r["step"] for r in s.poll()] == [2, 10, 11, 12]
    assert s.restarts == 1
    s.close()


def test_start_offset_skips_what_an_earlier_attempt_wrote(tmp_path):
    p = tmp_path / "metrics.jsonl"
    append(p, b'{"step": 1}\n')
    s = MetricStream(p, start_offset=p.stat().st_size)
    assert s.poll() == []
    append(p, b'{"step": 2}\n')
    assert s.poll() == [{"step": 2}]
    s.close()


def test_bounded_batches_catch_up(tmp_path):
    p = tmp_path / "metrics.jsonl"
    append(p, b"".join(b'{"step": %d, "loss": 0.5}\n' % i for i in range(5000)))
    s = MetricStream(p)
    steps = [r["step"] for batch in s.iter_batches(max_bytes=4096) for r in batch]
    assert steps == list(range(5000)) and not s.behind
    s.close()


def test_msgspec_and_stdlib_paths_agree():
    buf = (
        b"".join(b'{"t": 1.5, "step": %d, "loss": %s}\n' % (i, b"NaN" if i % 97 == 0 else b"0.25") for i in range(2000))
        + b"oops\n"
    )
    fast, bad_fast = decode_lines(buf)
    slow, bad_slow = decode_lines_stdlib(buf)
    assert bad_fast == bad_slow == 1
    assert len(fast) == len(slow) == 2000
    assert [r["step"] for r in fast] == list(range(2000))
    assert all((math.isnan(a["loss"]) and math.isnan(b["loss"])) or a == b for a, b in zip(fast, slow))


def test_regex_metrics_for_unmodified_scripts(tmp_path):
    rx = RegexMetrics(r"iter (?P<step>\d+): loss (?P<loss>\S+)")
    assert rx.parse("iter 120: loss 2.31") == {"step": 120, "loss": 2.31}
    assert math.isnan(rx.parse("iter 121: loss nan")["loss"])
    assert rx.parse("iter 122: loss -inf,")["loss"] == -math.inf
    assert rx.parse("loading data...") is None
    p = tmp_path / "out.log"
    append(p, b"starting\niter 1: loss 3.0\niter 2: loss 2.")
    s = MetricStream(p, regex=rx)
    assert s.poll() == [{"step": 1, "loss": 3.0}]
    append(p, b"5\n")
    assert s.poll() == [{"step": 2, "loss": 2.5}]
    s.close()


def test_file_watch_wakes_on_create_write_and_replace(tmp_path):
    import select

    from runner.supervision.metric_stream import FileWatch

    p = tmp_path / "metrics.jsonl"
    w = FileWatch.open_watch(p)
    if w is None:
        import pytest

        pytest.skip("no inotify on this host")

    def ready():
        r, _, _ = select.select([w], [], [], 5.0)
        w.drain()
        return bool(r)

    try:
        assert select.select([w], [], [], 0)[0] == []
        p.write_bytes(b'{"step": 1}\n')  # created
        assert ready()
        while select.select([w], [], [], 0.05)[0]:  # settle the events of the first write
            w.drain()
        append(p, b'{"step": 2}\n')  # written
        assert ready()
        new = tmp_path / "new"
        new.write_bytes(b"")
        os.replace(new, p)  # replaced
        assert ready()
        while select.select([w], [], [], 0.05)[0]:
            w.drain()
        append(p, b'{"step": 3}\n')  # the new file is watched too
        assert ready()
    finally:
        w.close()
