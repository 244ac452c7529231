"""Per-GPU utilisation, memory, temperature and power, and which run each GPU process belongs to.

Fed a `GpuReading` (sampled off the UI thread by `console.gpu_sampler`). Where NVML is
unavailable it says why and shows the host's CPU, memory and free disk instead.
"""

from __future__ import annotations

from rich.text import Text

from console.fmt import fmt_bytes
from console.gpu_sampler import GpuReading
from console.widgets.quiet_static import QuietStatic


def bar(percent: float | None, width: int = 8) -> Text:
    if percent is None:
        return Text("N/A".ljust(width), style="dim")
    filled = max(0, min(width, round(percent / 100 * width)))
    style = "green" if percent < 70 else ("yellow" if percent < 90 else "red")
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def _na(value: float | None, fmt: str) -> str:
    return "N/A" if value is None else fmt.format(value)


def _short_name(name: str | None) -> str:
    if not name:
        return "GPU"
    return name.replace("NVIDIA ", "").replace("GeForce ", "")


def gpu_lines(reading: GpuReading) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    if reading.error is not None:
        out.append(f"{reading.error}", style="bold yellow")
        h = reading.host
        if h is not None:
            out.append("\nhost: CPU ")
            out.append(f"{h.cpu_percent:.0f}% of {h.cpu_count}")
            out.append(" · mem ")
            out.append(f"{fmt_bytes(h.memory_used_bytes)}/{fmt_bytes(h.memory_total_bytes)}")
            out.append(" · disk free ")
            out.append(fmt_bytes(h.disk_free_bytes), style="bold")
            if h.disk_total_bytes:
                out.append(f" of {fmt_bytes(h.disk_total_bytes)}")
        return out
    runs_by_gpu: dict[int, list[str]] = {}
    for p in reading.processes:
        label = p.run_id or f"pid {p.pid}"
        runs_by_gpu.setdefault(p.gpu_index, [])
        if label not in runs_by_gpu[p.gpu_index]:
            runs_by_gpu[p.gpu_index].append(label)
    for i, g in enumerate(reading.gpus):
        if i:
            out.append("\n")
        out.append(f"{g.index} {_short_name(g.name)[:10]:<10} ", style="bold")
        out.append_text(bar(g.utilization_percent))
        out.append(f" {_na(g.utilization_percent, '{:.0f}%'):>4} ")
        mem_pct = (
            100 * g.memory_used_bytes / g.memory_total_bytes
            if g.memory_used_bytes is not None and g.memory_total_bytes
            else None
        )
        out.append("mem ")
        out.append(
            f"{_na(g.memory_used_bytes and g.memory_used_bytes / 2**30, '{:.1f}')}"
            f"/{_na(g.memory_total_bytes and g.memory_total_bytes / 2**30, '{:.0f}')}G",
            style="red" if mem_pct and mem_pct > 95 else "",
        )
        out.append(f" {_na(g.temperature_c, '{:.0f}°C'):>5} {_na(g.power_w, '{:.0f}W'):>5} ")
        runs = runs_by_gpu.get(g.index)
        out.append(", ".join(runs) if runs else "idle", style="cyan" if runs else "dim")
    if reading.processes_note:
        out.append("\n" + reading.processes_note, style="dim")
    return out


class GpuPanel(QuietStatic):
    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 5; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, reading: GpuReading | None) -> None:
        if reading is None:
            self.put(Text("GPUs: sampling…", style="dim"))
            return
        self.put(gpu_lines(reading))
