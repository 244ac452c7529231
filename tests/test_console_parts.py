"""The console's parts without a runner: history reduction, the braille plot, the incremental
metric reader, the GPU panel on recorded NVML answers, the keymap, retrieval and expiry."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from console.expiry import expiry_at
from console.gpu_sampler import GpuSampler, pid_owners
from console.keymap import load_keymap
from console.metrics_tail import MetricTail
from console.plot_canvas import Trace, render_plot
from console.retrieval import Item, copy_command
from console.series import SeriesStore
from console.widgets.gpus.gpu_panel import gpu_lines
from runner.campaign.errors import CampaignError
from runner.daemon.nvml import Nvml
from tests.fixtures.console_nvml import H200, RTX4090, NVMLError_LibraryNotFound, RecordedNvml


def test_reduce_keeps_min_and_max_of_each_column_at_any_length():
    rng = np.random.default_rng(1)
    for n in (10, 5_000, 300_000):
        x = np.arange(n, dtype=float)
        y = rng.random(n)
        y[n // 2] = 50.0  # a spike must survive the reduction
        s = SeriesStore()
        for a in range(0, n, 7_777):
            s.append(x[a : a + 7_777], y[a : a + 7_777])
        r = s.reduce(0, n - 1, 100)
        assert np.nanmax(r.vmax) == 50.0
        assert np.nanmin(r.vmin) == y.min()
        assert np.nanmean(r.mean) == pytest.approx(y.mean(), rel=0.05)


def test_nonfinite_points_are_marked_not_drawn():
    s = SeriesStore()
    s.append([1, 2, 3, 4], [1.0, float("nan"), float("inf"), 2.0])
    assert s.nonfinite_steps == [2.0, 3.0]
    r = s.reduce(1, 4, 4)
    assert r.vmax[0] == 1.0 and math.isnan(r.vmax[1]) and r.vmax[3] == 2.0


def test_plot_fills_exactly_its_box_with_labels():
    s = SeriesStore()
    x = np.arange(1000.0)
    s.append(x, 2 + np.cos(x / 50))
    r = s.reduce(0, 999, (60 - 8) * 2)
    text = render_plot([Trace("control", "cyan", r.vmin, r.vmax)], 60, 10, x_lo=0, x_hi=999)
    lines = text.plain.split("\n")
    assert len(lines) == 10 and all(len(ln) <= 60 for ln in lines)
    assert lines[0].startswith("━ control") and "step 999" in lines[-1]
    assert any(ch != " " and 0x2800 <= ord(ch) <= 0x28FF for ch in "".join(lines[1:-1]))
    assert lines[1].strip().startswith("3")  # the top label: max of 2 + cos = 3


def test_metric_tail_reads_only_complete_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"t": 1, "step": 1, "loss": 2.0}\n{"t": 2, "event": "checkpoint", "step": 1}\n{"t": 3, "st')
    tail = MetricTail(tmp_path)
    assert tail.poll() == 1
    with open(path, "a") as f:
        f.write('ep": 2, "loss": NaN}\nnot json\n{"t": 4, "step": 3, "loss": 1.5}\n')
    assert tail.poll() == 2
    assert list(tail.series.steps) == [1.0, 2.0, 3.0] and tail.series.nonfinite_steps == [2.0]
    assert tail.skipped == 1
    tail.close()


def test_gpu_panel_on_recorded_h200_and_4090():
    nv = Nvml(backend=RecordedNvml(devices=[H200, RTX4090]))
    sampler = GpuSampler(nv, process_every=5.0, monotonic=iter([0.0, 1.0, 2.0, 6.0]).__next__)
    readings = [sampler.read({"control-1": 4242}, None) for _ in range(4)]
    assert sampler.process_polls == 2  # at t=0 and t=6, not every tick
    first = readings[0]
    assert [g.name for g in first.gpus] == ["NVIDIA H200", "NVIDIA GeForce RTX 4090"]
    assert first.gpus[0].memory_total_bytes == 150754820096 and first.gpus[0].power_w == pytest.approx(612.345)
    assert readings[1].gpus[1].power_w is None  # the recorded "Not Supported"
    text = gpu_lines(readings[1]).plain
    assert "H200" in text and "RTX 4090" in text and "N/A" in text
    assert "control-1" in text  # pid 4242 on the H200 is the run's
    assert "pid 5151" in text  # a process no run owns


def test_gpu_panel_says_why_without_nvml(tmp_path):
    nv = Nvml(backend=RecordedNvml(fail_init=NVMLError_LibraryNotFound("libnvidia-ml.so.1: not found")))
    reading = GpuSampler(nv).read({}, tmp_path)
    assert reading.error and "library not found" in reading.error.lower()
    text = gpu_lines(reading).plain
    assert "host: CPU" in text and "disk free" in text


def test_gpu_processes_map_to_runs_through_descendants():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        grandchild = int(child.stdout.readline())
        owners = pid_owners({"run-a": child.pid})
        assert owners[child.pid] == "run-a" and owners[grandchild] == "run-a"
    finally:
        import psutil

        for p in psutil.Process(child.pid).children(recursive=True):
            p.kill()
        child.kill()
        child.wait(10)


def test_keymap_file(tmp_path):
    good = tmp_path / "keymap.toml"
    good.write_text('[keys]\nabort = "x"\n')
    assert load_keymap(good, known_ids={"abort"}) == {"abort": "x"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[keys]\nexplode = "x"\n')
    with pytest.raises(CampaignError, match="keys.explode"):
        load_keymap(bad, known_ids={"abort"})
    assert load_keymap(tmp_path / "missing.toml") == {}


def test_expiry_levels():
    b = {"expires_at": "2026-12-02T09:00:00Z", "retrieve_by": "2026-12-02T07:00:00Z"}
    end = 1796202000.0  # 2026-12-02T09:00:00Z
    assert expiry_at(b, end - 20 * 3600, 12).level == "ok"
    assert expiry_at(b, end - 3 * 3600, 12).level == "warning"
    assert expiry_at(b, end - 3600, 12).level == "critical"
    assert expiry_at(b, end + 1, 12).level == "expired"


def test_copy_command_lists_relative_paths(tmp_path):
    (tmp_path / "deliverables").mkdir()
    f = tmp_path / "deliverables" / "manifest.toml"
    f.write_text("x")
    ck = tmp_path / "runs" / "a-1" / "checkpoints" / "ckpt-000000010.pt"
    ck.parent.mkdir(parents=True)
    ck.write_bytes(b"12345")
    snap = {"campaign": {"root": str(tmp_path), "name": "c"}}
    cmd = copy_command(
        snap,
        [
            Item("deliverable", f, 1),
            Item("checkpoint", ck, 5),
            Item("checkpoint", tmp_path / "x.pt", 0, "not verified"),
        ],
        user="me",
        host="10.0.0.5",
        port=2222,
    )
    lines = cmd.splitlines()
    assert lines[0] == "rsync -avrP --files-from=- -e 'ssh -p 2222' \\"
    assert f"me@10.0.0.5:{tmp_path}/" in lines[1]
    assert lines[3:] == ["deliverables", "runs/a-1/checkpoints/ckpt-000000010.pt", "END"]


def test_retrieval_target_warns_about_private_addresses_and_can_be_set(monkeypatch):
    """Behind a provider's NAT the SSH server sees a private address the user's machine cannot
    reach: say so, and let CAMPAIGN_SSH_HOST/PORT name the real one."""
    from console.retrieval import address_note, ssh_target

    monkeypatch.delenv("CAMPAIGN_SSH_HOST", raising=False)
    monkeypatch.setenv("SSH_CONNECTION", "198.51.100.7 51000 10.0.3.4 22")
    target, port = ssh_target(user="me")
    assert target == "me@10.0.3.4" and port is None
    assert "private address" in address_note(target) and "CAMPAIGN_SSH_HOST" in address_note(target)
    assert address_note("me@8.8.8.8") is None and address_note("me@gpu-host.example") is None
    monkeypatch.setenv("CAMPAIGN_SSH_HOST", "ssh.provider.example")
    monkeypatch.setenv("CAMPAIGN_SSH_PORT", "2222")
    assert ssh_target(user="me") == ("me@ssh.provider.example", 2222)
