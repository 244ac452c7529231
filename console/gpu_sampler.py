"""What the GPU panel shows, sampled off the UI thread once a tick.

NVML is initialised once (`runner.daemon.nvml.Nvml` keeps the device handles); utilisation, memory,
temperature and power are read every tick, the process list (milliseconds a call) only every
`process_every` seconds. GPU processes are mapped to run ids through each run's pid and its
descendants (psutil, a walk of every process on the host): done when the process list is read or
the runs' pids change, not every tick. Where NVML is unavailable, the host's CPU, memory and the
free disk of the campaign folder are sampled instead, every `HOST_EVERY` seconds, so the panel
still says something useful without costing an idle console a repaint each second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from runner.daemon.nvml import GpuProcess, GpuSample, Nvml

HOST_EVERY = 5.0  # seconds between host samples where NVML is unavailable


@dataclass(frozen=True)
class HostSample:
    cpu_percent: float
    cpu_count: int
    memory_used_bytes: int
    memory_total_bytes: int
    disk_free_bytes: int | None
    disk_total_bytes: int | None
    disk_path: str


@dataclass(frozen=True)
class MappedProcess:
    gpu_index: int
    pid: int
    used_memory_bytes: int | None
    run_id: str | None  # None: a process no run of this campaign owns


@dataclass(frozen=True)
class GpuReading:
    error: str | None  # why NVML is unavailable; None when it works
    gpus: list[GpuSample] = field(default_factory=list)
    processes: list[MappedProcess] = field(default_factory=list)
    processes_note: str | None = None  # e.g. pids from another pid namespace
    host: HostSample | None = None


def pid_owners(run_pids: dict[str, int | None]) -> dict[int, str]:
    """pid -> run id for every run's process and all of its descendants (a run's own pid counts
    even where psutil cannot see it: the runner reported it from the same host)."""
    owners: dict[int, str] = {}
    for run_id, pid in run_pids.items():
        if not pid:
            continue
        owners[int(pid)] = run_id
        try:
            proc = psutil.Process(int(pid))
            for child in proc.children(recursive=True):
                owners[child.pid] = run_id
        except (psutil.Error, ValueError):
            continue
    return owners


def sample_host(folder: str | Path | None) -> HostSample:
    mem = psutil.virtual_memory()
    free = total = None
    path = str(folder or ".")
    try:
        du = psutil.disk_usage(path)
        free, total = du.free, du.total
    except OSError:
        pass
    return HostSample(
        cpu_percent=psutil.cpu_percent(interval=None),
        cpu_count=psutil.cpu_count() or 1,
        memory_used_bytes=mem.total - mem.available,
        memory_total_bytes=mem.total,
        disk_free_bytes=free,
        disk_total_bytes=total,
        disk_path=path,
    )


class GpuSampler:
    """Holds the NVML session and the last process list between ticks. Call `read` from a thread."""

    def __init__(
        self,
        nvml: Nvml | Callable[[], Nvml] | None = None,
        *,
        process_every: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        host: Callable[[str | Path | None], HostSample] = sample_host,
    ) -> None:
        """`host`: how the host is read where NVML is unavailable (recorded in screenshots)."""
        self._nvml_or_factory = nvml
        self._sample_host = host
        self._nvml: Nvml | None = nvml if isinstance(nvml, Nvml) else None
        self.process_every = process_every
        self._monotonic = monotonic
        self._last_proc_at: float | None = None
        self._procs: list[GpuProcess] = []
        self.process_polls = 0
        self._owners: dict[int, str] = {}
        self._owners_for: dict[str, int | None] | None = None  # the run pids `_owners` was mapped from
        self._host: HostSample | None = None
        self._host_at = 0.0

    @property
    def nvml(self) -> Nvml:
        if self._nvml is None:
            factory = self._nvml_or_factory
            self._nvml = factory() if callable(factory) else Nvml.shared()
        return self._nvml

    def read(self, run_pids: dict[str, int | None], folder: str | Path | None) -> GpuReading:
        nv = self.nvml
        if not nv.available:
            now = self._monotonic()
            if self._host is None or now - self._host_at >= HOST_EVERY or self._host.disk_path != str(folder or "."):
                self._host, self._host_at = self._sample_host(folder), now
            return GpuReading(error=nv.error, host=self._host)
        gpus = nv.sample()
        now = self._monotonic()
        polled = self._last_proc_at is None or now - self._last_proc_at >= self.process_every
        if polled:
            self._procs = nv.processes()
            self._last_proc_at = now
            self.process_polls += 1
        if polled or run_pids != self._owners_for:
            self._owners, self._owners_for = pid_owners(run_pids), dict(run_pids)
        owners = self._owners
        mapped = [MappedProcess(p.gpu_index, p.pid, p.used_memory_bytes, owners.get(p.pid)) for p in self._procs]
        note = None
        if mapped and not any(p.run_id for p in mapped) and not any(psutil.pid_exists(p.pid) for p in mapped):
            note = "GPU processes not visible here (another pid namespace): cannot map them to runs"
        return GpuReading(error=None, gpus=gpus, processes=mapped, processes_note=note)
