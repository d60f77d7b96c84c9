"""Speed paths that must not change answers: a point stopped once it certainly misses a
percentile bound (plan's SLO), and jobs on forked processes instead of Dask."""

from __future__ import annotations

import math

from costmodel.shipped import resolve_profile
from costmodel.slo import parse_slo
from simulate.plan.planner import miss_bounds
from simulate.point import run_point
from simulate.sim import MISS_STOP, MissBound
from simulate.parallel import Workers, run_tasks

PROFILE = resolve_profile(None, "h200")


def test_a_point_meeting_its_bounds_is_not_changed_by_them():
    plain = run_point(PROFILE, "ar", 8.0, replicas=1, duration_s=30.0).summary
    bounds = (MissBound("ttft", 95, plain.ttft_ms["p95"] + 1), MissBound("e2e", 99, plain.e2e_ms["p99"] + 1))
    watched = run_point(PROFILE, "ar", 8.0, replicas=1, duration_s=30.0, miss_bounds=bounds).summary
    assert plain.flat() == watched.flat()


def test_a_point_that_certainly_misses_stops_early_and_fails_the_slo():
    slo = parse_slo("p95_ttft_ms<=1000,p95_e2e_ms<=5000")
    full = run_point(PROFILE, "diffusion", 40.0, replicas=1, duration_s=30.0).summary
    stopped = run_point(PROFILE, "diffusion", 40.0, replicas=1, duration_s=30.0, miss_bounds=miss_bounds(slo)).summary
    assert not slo.meets(full.flat()) and not slo.meets(stopped.flat())
    assert not stopped.stable and stopped.stability_reason.startswith(MISS_STOP)
    assert stopped.simulated_s < full.simulated_s


def test_miss_bounds_cover_percentiles_of_queue_ttft_and_e2e_only():
    b = miss_bounds(parse_slo("p95_ttft_ms<=1000,mean_e2e_ms<=4000,p99_tpot_ms<=50,p90_queue_ms<200"))
    assert b == (MissBound("ttft", 95.0, 1000.0), MissBound("queue", 90.0, 200.0))


def test_forked_processes_return_the_serial_results_in_order():
    args = [(2, i) for i in range(7)]
    seen = []
    out = run_tasks(math.pow, args, cluster=Workers(workers=2, local="processes"), on_done=lambda i, r: seen.append(i))
    assert out == [math.pow(*a) for a in args] and sorted(seen) == list(range(7))
