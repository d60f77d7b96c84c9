"""A day too large to hold in memory, simulated hour by hour (simulate.plan.day calls it when one
fleet's continuous day would need more than the memory budget: workload.check_run_size).

Each (fleet, hour) is one job: the worker that runs it draws only its own requests (the curve's
window, time-rescaled arrivals from a seed of its own) and hands back the hour's row
(simulate/cluster/outcome.py), so memory is bounded by a span's requests per worker, never by the
day, and the jobs spread over the workers: Dask's local cluster (one worker per core) or a running
scheduler (`plan --scheduler`).

An hour of such a service holds many more requests than its verdict needs, so a job simulates a
span of it: SETTLE_FIRST_S simulated seconds on the hour's busiest minutes after a warm-up
(WARMUP_S, served and not judged), judged on batch means (pass, fail, borderline); a borderline span
is simulated again SPAN_GROWTH times as long until the verdict settles or the cap (the whole hour,
SPAN_CAP_REQUESTS, the memory budget's span), where it stays borderline. The span's figures become
the hour's (as_hour): its requests and rate, GPU-hours, energy and dollars from the hour's rate and
length; attainment, percentiles, utilisation and fleet from the span (docs/cluster.md says why).

What it gives up against the continuous day: each span starts with empty replicas at the fleet's
size then (static: the peak fleet; autoscaled: the most loaded fleet its policy holds at the rate,
fewest_held), so a queue, a replica still provisioning or the scale-down window's memory does not
carry over from earlier in the day.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from costmodel.errors import UserError
from simulate.api import resolve_workload
from simulate.cluster.autoscalers import make_autoscaler
from simulate.cluster.fleet import simulate_fleet
from simulate.cluster.load import LoadCurve, curve_requests
from costmodel.costing.verdict import BORDERLINE
from simulate.cluster.outcome import interval_rows, summarise_span, util_sample_s
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import Scaling
from simulate.workload import BYTES_PER_REQUEST, check_run_size, memory_budget_bytes

HOUR_SEED_STRIDE = 1_000_003  # an hour's requests are drawn from seed * stride + hour + 1
# peak resident memory of an hour job per request: 3.6 GB for an MTP hour of 0.9 million requests
# (benchmarks/bench_speed.py, 2026-11-29: the mode's per-request draws, the records, the latencies),
# twice workload.BYTES_PER_REQUEST: how many hour jobs run at once within the budget
HOUR_BYTES_PER_REQUEST = 4096


def compressed(lc: LoadCurve, c: float) -> LoadCurve:
    """The curve's time axis c times faster (the day's time compression, simulate/plan/day.py)."""
    return LoadCurve(tuple(t / c for t in lc.time_s), lc.qps, f"{lc.source}, time compressed {c:g}x" if c != 1 else lc.source)


def compressed_scaling(s: Scaling, c: float) -> Scaling:
    """The autoscaler's clocks c times faster (scrape interval, scale-down window, provisioning)."""
    return replace(s, scrape_interval_s=s.scrape_interval_s / c, scale_down_window_s=s.scale_down_window_s / c,
                   startup_s=s.startup_s / c, load_gb_per_s=s.load_gb_per_s * c)


def hour_windows(span_s: float, interval_s: float) -> list[tuple[float, float]]:
    """The day's intervals (uncompressed seconds)."""
    n = max(1, math.ceil(span_s / interval_s - 1e-9))
    return [(k * interval_s, min((k + 1) * interval_s, span_s)) for k in range(n)]


def busiest_hour_requests(lc, interval_s: float, c: float) -> float:
    """Requests of the busiest interval of the (compressed) day: what one job holds."""
    cum = lc.curve.cumulative()
    at = [float(x) for x in (lc.curve.time_s)]
    edges = [t for w in hour_windows(lc.span_s, interval_s) for t in w]
    lam = np.interp(edges, at, cum)
    return float(max(lam[1::2] - lam[0::2])) / c


def check_hours(cfg, lc, fleets: int) -> None:
    """Refuse a day whose busiest hour alone exceeds the memory budget (one line naming the knobs);
    where hours run on spans (cfg.hour_spans), only the first span need fit: a span grows within the budget."""
    per_hour = busiest_hour_requests(lc, cfg.interval_s, float(cfg.compress))
    first = lc.peak_qps * (SETTLE_FIRST_S + warmup_for(SETTLE_FIRST_S))
    if cfg.hour_spans and first < per_hour:
        per_hour, what = first, "the first span of the busiest hour of the day"
    else:
        what = "the busiest hour of the day"
    check_run_size(per_hour, cfg.max_replicas, what, knobs="a lower peak or --load-scale, or a higher --compress", repeat=False)


def hour_workers(cfg, lc, cores: int) -> tuple[int, float]:
    """How many hour jobs run at once within the memory budget (at most `cores`), and the longest span
    (simulated seconds of judged arrivals) each may grow to: inf (the whole hour) where that many
    whole busiest hours fit, else the longest span of the doubling sequence that does (the stated cap)."""
    budget = memory_budget_bytes()
    per_hour = busiest_hour_requests(lc, cfg.interval_s, float(cfg.compress))
    per_span = lambda s: min(per_hour, lc.peak_qps * (s + warmup_for(s))) * HOUR_BYTES_PER_REQUEST  # noqa: E731
    workers = max(1, min(cores, int(budget // max(1.0, per_span(SETTLE_FIRST_S)))))
    if workers * per_hour * HOUR_BYTES_PER_REQUEST <= budget:
        return workers, math.inf
    cap = SETTLE_FIRST_S
    while workers * per_span(cap * SPAN_GROWTH) <= budget:
        cap *= SPAN_GROWTH
    return workers, cap


SETTLE_FIRST_S = 30.0  # simulated seconds of arrivals an hour's verdict is first judged on
SPAN_GROWTH = 2  # a borderline span is simulated again this many times as long, up to the whole hour or a cap
# the cap: a span grows only while it draws at most this many requests (10 batch means of 15,000: an hour
# whose interval still straddles its bound there is within that noise of it: borderline)
SPAN_CAP_REQUESTS = 150_000
SPAN_SAMPLES = 10  # counter samples per span (the headroom term's batch means: outcome.BATCHES sub-windows)
WARMUP_S = 12.0  # a span is preceded by at least this long (whole sample steps) of arrivals served on empty replicas and not judged


def warmup_for(span_s: float) -> float:
    """The warm-up before a span: WARMUP_S rounded up to whole sample steps (so its end is a counter sample)."""
    step = span_s / SPAN_SAMPLES
    return math.ceil(WARMUP_S / step - 1e-9) * step


def hour_job(hardware: str, mode: str, policy: str, n_peak: int, target: float | None, cfg, lc, slo, hour: int, t0: float, t1: float,
             cap_s: float = math.inf) -> dict:
    """One fleet over one hour of the day, in a worker: simulated until its verdict is settled (module docstring:
    spans of SETTLE_FIRST_S, SPAN_GROWTH times longer while borderline, up to `cap_s`, SPAN_CAP_REQUESTS
    or the whole hour), its row the hour's. `simulated_s`: seconds of the hour's arrivals (of the real day) judged."""
    w0 = time.perf_counter()
    c = float(cfg.compress)
    if lc.curve.window(t0, t1).expected_requests <= 0:
        raise UserError(f"{lc.source}: no request is expected between {t0:g} and {t1:g} s", "give a curve with a positive rate in every hour")
    span, n = SETTLE_FIRST_S, 0
    while cfg.hour_spans and span + warmup_for(span) < (t1 - t0) / c:
        a, b = busiest_span(lc.curve, t0, t1, (span + warmup_for(span)) * c)
        row, name, k = _simulate(hardware, mode, policy, n_peak, target, cfg, slo, hour, lc.curve.window(a, b), warmup_s=warmup_for(span))
        n += k
        nxt = span * SPAN_GROWTH
        if row.slo_verdict != BORDERLINE or nxt > cap_s or span_requests(lc.curve, t0, t1, nxt, c) > SPAN_CAP_REQUESTS:
            row = as_hour(row, hour, t0, t1, c, lc.curve.window(t0, t1).expected_requests / c)
            return {"row": row, "name": name, "requests": n, "simulated_s": span * c, "wall_s": time.perf_counter() - w0}
        span = nxt
    row, name, k = _simulate(hardware, mode, policy, n_peak, target, cfg, slo, hour, lc.curve.window(t0, t1))
    row = replace(row, interval=hour, start_s=t0 / c, end_s=t1 / c)
    return {"row": row, "name": name, "requests": n + k, "simulated_s": t1 - t0, "wall_s": time.perf_counter() - w0}


def span_requests(curve: LoadCurve, t0: float, t1: float, span_s: float, c: float) -> float:
    """Requests a span of `span_s` simulated seconds (and its warm-up) of the hour [t0, t1] draws: the
    whole hour's where the span would not fit in it."""
    length = (span_s + warmup_for(span_s)) * c
    a, b = (t0, t1) if length >= t1 - t0 else busiest_span(curve, t0, t1, length)
    return curve.window(a, b).expected_requests / c


def busiest_span(curve: LoadCurve, t0: float, t1: float, length_s: float) -> tuple[float, float]:
    """The `length_s` seconds of [t0, t1] centred on the hour's highest rate (clipped to the hour):
    a static fleet meeting the SLO there meets it at every lower rate of the hour."""
    t = np.asarray(curve.time_s, float)
    grid = np.concatenate([np.linspace(t0, t1, 61), t[(t > t0) & (t < t1)]])
    top = float(grid[int(np.argmax(curve.rate_at(grid)))])
    a = min(max(top - length_s / 2, t0), t1 - length_s)
    return a, a + length_s


def as_hour(row, hour: int, t0: float, t1: float, c: float, requests: float):
    """A span's row as its hour's (compressed units): the hour's expected requests and rate, the span's
    shares of them rejected, timed out and unfinished, its attainment, latencies, utilisation and fleet,
    and its GPU-hours, energy and dollars per second over the hour's length."""
    hour_s = (t1 - t0) / c
    scale = hour_s / max(row.end_s - row.start_s, 1e-9)
    n = round(requests)
    share = (lambda k: round(k / row.requests_arrived * n)) if row.requests_arrived else (lambda k: 0)
    return replace(row, interval=hour, start_s=t0 / c, end_s=t1 / c, offered_qps=n / hour_s, requests_arrived=n,
                   requests_rejected=share(row.requests_rejected), requests_timed_out=share(row.requests_timed_out),
                   requests_unfinished=share(row.requests_unfinished), goodput_rps=row.slo_attainment * n / hour_s,
                   gpu_hours=row.gpu_hours * scale, energy_kwh=row.energy_kwh * scale, cost_usd=row.cost_usd * scale)


def fewest_held(qps: float, target: float, tolerance: float) -> int:
    """The fewest replicas a request-rate policy (target per replica) holds at `qps` without scaling
    up: HPA scales up only where the load per replica is beyond (1 + tolerance) x target, so a rising
    load reaches that edge before each scale-up (pass the tolerance); a falling one is scaled down to
    the policy's own size, ceil(qps / target), and stays at most that loaded (pass 0)."""
    return max(1, math.ceil(qps / (target * (1 + tolerance)) - 1e-9))


def _simulate(hardware: str, mode: str, policy: str, n_peak: int, target: float | None, cfg, slo, hour: int, window: LoadCurve,
              warmup_s: float = 0.0) -> tuple:
    """The fleet over one window of the curve (compressed), its first `warmup_s` simulated seconds a
    warm-up: (its row, the policy's name, requests simulated)."""
    c = float(cfg.compress)
    profile = cfg.profile(hardware)
    reqs = curve_requests(profile, resolve_workload(cfg.workload), compressed(window, c), cfg.seed * HOUR_SEED_STRIDE + hour + 1)
    scaling = compressed_scaling(cfg.scaling, c)
    if policy == "static":
        scaling = replace(scaling, min_replicas=n_peak, max_replicas=n_peak, initial_replicas=n_peak)
        auto = make_autoscaler("static", replicas=n_peak)
    else:
        first = max(scaling.min_replicas, min(n_peak, math.ceil(window.qps[0] / target)))  # as the continuous day's first size
        target *= cfg.autoscale_headroom
        if warmup_s:  # a span: the most loaded fleet the policy holds at its rate (fewest_held)
            tolerance = scaling.tolerance if window.qps[-1] > window.qps[0] else 0.0
            first = max(scaling.min_replicas, min(n_peak, fewest_held(window.qps[0], target, tolerance)))
        scaling = replace(scaling, initial_replicas=first, max_replicas=max(scaling.max_replicas, n_peak))
        auto = make_autoscaler("request-rate", target=target)
    pool = PoolSpec(f"{hardware}/{mode}", profile, mode, autoscaler=auto, scaling=scaling, engine=cfg.engine())
    span = window.span_s / c - warmup_s
    if warmup_s:
        sample_s = span / SPAN_SAMPLES
    else:
        sample_s = span if slo.max_utilisation is None else util_sample_s(span)
    run = simulate_fleet([pool], reqs, seed=cfg.seed, sample_s=sample_s)
    row = interval_rows(run, slo.bounds, span, span, max_utilisation=slo.max_utilisation, start_s=warmup_s)[0]
    name = "static" if policy == "static" else f"request-rate:target={target:.3g}"
    n = len(reqs)
    return row, name, n


def fleet_days(results: list[dict], keys: list[tuple], fleets: list[tuple], cfg, lc, bill, flat) -> list[dict]:
    """The hour jobs' rows gathered per fleet (key: hardware, mode, policy, peak replicas) into the
    day's bill and rows, one per fleet of `fleets` in its order, as simulate.plan.day._day_job returns
    them for a continuous day."""
    c = float(cfg.compress)
    out = []
    for key in fleets:
        mine = [r for r, k in zip(results, keys) if k == key]
        mine.sort(key=lambda r: r["row"].interval)
        rows = [r["row"] for r in mine]
        summ = summarise_span(rows, lc.span_s / c)[0]
        policy = key[2]
        flat_rows = [{**d, "simulated_s": r["simulated_s"]} for d, r in zip(flat(rows, policy, c, cfg.interval_s), mine)]
        out.append({"rows": flat_rows, "bill": bill(summ, rows, policy, mine[0]["name"], c),
                    "wall_s": sum(r["wall_s"] for r in mine), "requests": sum(r["requests"] for r in mine)})
    return out
