"""NVML behind one small layer: initialised once, device handles kept, a failing call gives None.

Used by the runner (GPU slot count, `status --json`) and the console's GPU panel. As in nvitop, a
single failing query (a GPU that fell off the bus, a field a consumer card does not report) yields
None for that value, shown as "N/A", and never raises; when NVML cannot start at all, `error` says
why in words a user can act on. The backend is the `pynvml` module from nvidia-ml-py, or any object
with the same functions (tests replay recorded answers through one).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str | None
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_w: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuProcess:
    gpu_index: int
    pid: int
    used_memory_bytes: int | None


def _explain(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc) or name
    if "LibraryNotFound" in name or "not found" in text.lower() and "library" in text.lower():
        return "NVML library not found (no NVIDIA driver on this host)"
    if "DriverNotLoaded" in name:
        return "NVIDIA driver not loaded"
    if "NoPermission" in name:
        return "no permission to query NVML"
    return f"NVML unavailable: {text}"


class Nvml:
    """One NVML session for the process. Thread-safe: the console samples it off the UI thread."""

    _shared: Nvml | None = None
    _shared_lock = threading.Lock()

    def __init__(self, backend: Any | None = None) -> None:
        self._lock = threading.Lock()
        self.error: str | None = None
        self._handles: list[Any] = []
        self._names: list[str | None] = []
        self._nv: Any = None  # the pynvml module (or a stand-in); no handles unless it initialised
        try:
            nv: Any = backend if backend is not None else importlib.import_module("pynvml")  # nvidia-ml-py
            self._nv = nv
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._names = [self._call(nv.nvmlDeviceGetName, h) for h in self._handles]
            self._names = [n.decode() if isinstance(n, bytes) else n for n in self._names]
            if count == 0:
                self.error = "NVML found no GPU on this host"
        except Exception as exc:  # ImportError, NVMLError_* and anything a broken driver raises
            self.error = _explain(exc)
            self._handles = []

    @classmethod
    def shared(cls) -> Nvml:
        """The process-wide session (NVML is initialised once, not per tick)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = Nvml()
            return cls._shared

    @property
    def available(self) -> bool:
        return self.error is None

    def device_count(self) -> int:
        return len(self._handles)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None

    def sample(self) -> list[GpuSample]:
        """Every device once: utilisation, memory, temperature, power. Cheap (microseconds each)."""
        out = []
        with self._lock:
            nv = self._nv
            for i, h in enumerate(self._handles):
                util = self._call(nv.nvmlDeviceGetUtilizationRates, h)
                mem = self._call(nv.nvmlDeviceGetMemoryInfo, h)
                temp = self._call(nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
                power = self._call(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
                out.append(
                    GpuSample(
                        index=i,
                        name=self._names[i] if i < len(self._names) else None,
                        utilization_percent=float(util.gpu) if util is not None else None,
                        memory_used_bytes=int(mem.used) if mem is not None else None,
                        memory_total_bytes=int(mem.total) if mem is not None else None,
                        temperature_c=float(temp) if temp is not None else None,
                        power_w=power / 1000.0 if power is not None else None,
                    )
                )
        return out

    def processes(self) -> list[GpuProcess]:
        """Compute processes on every GPU. Milliseconds a call: poll every few seconds, not every tick."""
        out: list[GpuProcess] = []
        with self._lock:
            nv = self._nv
            for i, h in enumerate(self._handles):
                procs = self._call(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
                for p in procs:
                    used = getattr(p, "usedGpuMemory", None)
                    out.append(
                        GpuProcess(
                            gpu_index=i, pid=int(p.pid), used_memory_bytes=int(used) if isinstance(used, int) else None
                        )
                    )
        return out
