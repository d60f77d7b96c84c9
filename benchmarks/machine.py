"""What the machine did besides the benchmark: on a shared VM the hypervisor's steal time stretches
every wall and CPU figure, so the benchmarks print it beside them."""

from __future__ import annotations

from pathlib import Path


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time counters (/proc/stat: user nice system idle iowait irq softirq steal)."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None


def steal(t0: list[int] | None) -> str:
    """CPU time the hypervisor gave other tenants since t0, as a share of all CPU time."""
    t1 = cpu_ticks()
    if not t0 or not t1 or len(t1) < 8 or sum(t1) <= sum(t0):
        return "steal n/a"
    return f"steal {100 * (t1[7] - t0[7]) / (sum(t1) - sum(t0)):.1f}% of CPU time"
