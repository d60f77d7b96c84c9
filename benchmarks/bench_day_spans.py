"""A day run hour by hour, each hour on its busiest span until its verdict settles, against the same
day with every whole hour simulated (docs/cluster.md): each fleet's monthly bill, hours meeting the SLO
(borderline, failing), SLO attainment, the requests simulated and the CPU seconds of both runs.

    .venv/bin/python benchmarks/bench_day_spans.py [--peak 150] [--budget-gib 0.5]

The day: diurnal at PEAK (trough 30% of it, at 14 h), MTP on an H100, every fleet simulated, under a
memory budget small enough that the day runs hour by hour (COSTMODEL_MEMORY_BUDGET_GIB).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_s() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def one(peak: float, spans: bool) -> tuple[list, int, float, float]:
    """(bills, requests simulated, wall s, CPU s) of the day with or without spans."""
    from simulate.plan.day import DayConfig, run_day

    lines: list[str] = []
    cfg = DayConfig(load=f"diurnal:peak={peak:g},trough={0.3 * peak:g},peak_hour=14", hardware=["h100-sxm"], modes=["mtp"],
                    every_fleet=True, hour_spans=spans)
    c0, t0 = cpu_s(), time.perf_counter()
    out = run_day(cfg, progress=lines.append)
    done = [re.search(r"hour \d+: ([\d,]+) requests", ln) for ln in lines]
    return out.bills, sum(int(m.group(1).replace(",", "")) for m in done if m), time.perf_counter() - t0, cpu_s() - c0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peak", type=float, default=150.0, help="the curve's peak QPS")
    ap.add_argument("--budget-gib", type=float, default=0.5, help="the memory budget (small enough to run the day hour by hour)")
    a = ap.parse_args(argv)
    os.environ["COSTMODEL_MEMORY_BUDGET_GIB"] = f"{a.budget_gib:g}"
    from costmodel import native

    print(native.status())
    print(f"{'hours':<8} {'policy':<11} {'$/month':>9} {'GPU-h/day':>10} {'meeting':>8} {'borderline':>10} {'failing':>8} {'attain':>7}")
    for spans in (True, False):
        bills, requests, wall, cpu = one(a.peak, spans)
        name = "spans" if spans else "whole"
        for b in bills:
            print(f"{name:<8} {b.policy:<11} {b.cost_usd_per_month:9,.0f} {b.gpu_hours_per_day:10.1f} {b.hours_meeting_slo:8d} {b.hours_borderline:10d} "
                  f"{b.hours_failing:8d} {b.slo_attainment:7.4f}")
        print(f"{name:<8} {requests:,} requests simulated in {wall:.1f} s wall, {cpu:.1f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
