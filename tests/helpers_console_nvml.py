"""Recorded NVML answers for the console's GPU panel tests: an object with pynvml's functions that
replays what an H200 host and an RTX 4090 host answered (values as NVML reports them: bytes,
milliwatts, percent), one recorded sample per call, cycling. Calls a device does not support raise
the way pynvml does, and a host without a driver fails at nvmlInit."""

from __future__ import annotations

from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


H200 = {
    "name": "NVIDIA H200",
    "memory_total": 150754820096,
    "samples": [  # (util %, memory used bytes, temperature C, power mW)
        (97, 121_634_078_720, 64, 612_345),
        (95, 121_701_187_584, 65, 598_110),
        (98, 121_768_296_448, 65, 640_872),
    ],
    "processes": [(4242, 121_382_420_480)],
}
RTX4090 = {
    "name": "NVIDIA GeForce RTX 4090",
    "memory_total": 25757220864,
    "samples": [
        (88, 20_971_520_000, 71, 402_117),
        (91, 21_038_628_864, 72, None),  # power not supported on this read: N/A
        (86, 21_038_628_864, 72, 389_004),
    ],
    "processes": [(5151, 20_500_000_000)],
}


class RecordedNvml:
    """pynvml-shaped backend replaying recorded answers for `devices`."""

    def __init__(
        self,
        devices=(H200, RTX4090),
        *,
        fail_init: Exception | None = None,
        process_pids: dict[int, list[int]] | None = None,
    ) -> None:
        self.devices = list(devices)
        self.fail_init = fail_init
        self.process_pids = process_pids or {}  # override the recorded pids (map to live runs)
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name] - 1

    def nvmlInit(self):
        self._count("nvmlInit")
        if self.fail_init is not None:
            raise self.fail_init

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.devices[h]["name"]

    def _sample(self, h, what):
        n = self.calls.get(f"{what}:{h}", 0)
        self.calls[f"{what}:{h}"] = n + 1
        samples = self.devices[h]["samples"]
        return samples[n % len(samples)]

    def nvmlDeviceGetUtilizationRates(self, h):
        util = self._sample(h, "util")[0]
        return SimpleNamespace(gpu=util, memory=util // 2)

    def nvmlDeviceGetMemoryInfo(self, h):
        used = self._sample(h, "mem")[1]
        total = self.devices[h]["memory_total"]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._sample(h, "temp")[2]

    def nvmlDeviceGetPowerUsage(self, h):
        power = self._sample(h, "power")[3]
        if power is None:
            raise NVMLError_NotSupported("Not Supported")
        return power

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._count("processes")
        recorded = self.devices[h]["processes"]
        pids = self.process_pids.get(h)
        if pids is not None:
            recorded = [(pid, recorded[0][1] if recorded else None) for pid in pids]
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in recorded]
