"""A fleet run in intervals (an hour by default) and over its span: goodput, SLO attainment,
fleet size, utilisation, GPU-hours, energy and dollars, per pool and for the fleet.

Per request, a bound `p95_ttft_ms<=1000` reads as "TTFT <= 1000 ms": a request meets the SLO
when it finished and every such limit holds. Per interval (requests by arrival time):
- slo_attainment: requests meeting the SLO / requests arrived (rejected and unfinished ones miss);
- goodput_rps: requests meeting the SLO per second of the interval;
- each bound's own statistic over the interval's arrivals (a rejected or unfinished request
  counts as infinitely late), and meets_slo: every bound holds, and utilisation is at most
  `max_utilisation` when the SLO has that headroom term.
GPU time is billed from a replica's request to its retirement, inside [0, span): the span is one
period of a recurring load (a day), so the drain after it belongs to the next period.

Each interval's SLO verdict (pass, fail or borderline, costmodel/costing/verdict.py's words) rests on
batch means: the interval's requests, in arrival order, cut into BATCHES contiguous batches; each
bound's statistic per batch; the 95% Student-t interval of their mean. Pass: every interval lies
wholly within its bound; fail: one lies wholly beyond it; otherwise borderline (the interval's figure
is too close to its bound to call), never a clean pass or fail. An interval with too few requests for
two batches of MIN_BATCH_REQUESTS is judged on its figures. The headroom term (`max_utilisation`)
is judged alike on the utilisation of BATCHES equal sub-windows of the interval where the run
sampled its counters that often (util_sample_s: the day does when the SLO has the term), else on
the interval's utilisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.costing.terms import DAYS_PER_MONTH
from costmodel.costing.verdict import BORDERLINE, FAIL, PASS, ci_columns
from costmodel.intervals import t_interval
from costmodel.schemas.day import IntervalRow
from simulate.cluster.fleet import REJECT_FULL, REJECT_TIMEOUT, FleetRun
from simulate.cluster.power import IDLE_POWER_FRAC, power_w

BATCHES = 10  # batch means per interval (a classic choice: enough degrees of freedom, batches long enough to be nearly independent)
MIN_BATCH_REQUESTS = 20  # a batch's p95 rests on at least one request above it
LATE_MS = 1e18  # a rejected or unfinished request's latency in the interval statistics
METRIC_END = {"queue": "start_s", "ttft": "first_s", "e2e": "finish_s"}


@dataclass(frozen=True)
class RequestBound:
    """One latency bound: `stat` (p50/p90/p95/p99/mean) of `metric` (queue/ttft/e2e/tpot) <= limit_ms."""

    stat: str
    metric: str
    limit_ms: float

    @property
    def column(self) -> str:
        return f"{self.metric}_ms_{self.stat}"


def _latencies(run: FleetRun) -> dict[str, np.ndarray]:
    reqs, rec = run.reqs, run.rec
    arr = reqs.arrival_s
    out = {m: (getattr(rec, col) - arr) * 1e3 for m, col in METRIC_END.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["tpot"] = np.where(reqs.output_tokens > 1, (out["e2e"] - out["ttft"]) / (reqs.output_tokens - 1), 0.0)
    done = np.isfinite(rec.finish_s)
    return {m: np.where(done, np.nan_to_num(x, nan=LATE_MS), LATE_MS) for m, x in out.items()}


def _stat(x: np.ndarray, stat: str) -> float:
    if len(x) == 0:
        return float("nan")
    v = float(x.mean()) if stat == "mean" else float(np.percentile(x, float(stat[1:])))
    return math.inf if v >= LATE_MS / 10 else v


UTIL_CI = ("utilisation_ci95_low", "utilisation_ci95_high")


def util_sample_s(interval_s: float) -> float:
    """The counter sampling a run needs for the headroom term's batch means: BATCHES per interval."""
    return interval_s / BATCHES


def batch_interval(x: np.ndarray, stat: str, limit_ms: float) -> tuple[float, float]:
    """The 95% t-interval of the mean of `stat` over up to BATCHES contiguous batches of `x` (latencies
    in arrival order); (nan, nan) when fewer than two batches of MIN_BATCH_REQUESTS fit. A batch whose
    statistic is unbounded (rejected or unfinished requests) counts at the bound for the low end and
    leaves the high end unbounded (as the plan's replications: simulate/plan/settle.py)."""
    k = min(BATCHES, len(x) // MIN_BATCH_REQUESTS)
    if k < 2:
        return math.nan, math.nan
    vals = np.array([_stat(b, stat) for b in np.array_split(x, k)])
    late = ~np.isfinite(vals)
    lo, hi = t_interval(np.where(late, limit_ms, vals))
    return lo, (math.inf if late.any() else hi)


def hour_verdict(stats: dict, cis: dict, bounds, meets: bool, util: float, max_util: float | None) -> tuple[str, str]:
    """(pass | fail | borderline, why it is not settled) of one interval (module docstring)."""
    fail, open_ = [], []
    for b in bounds:
        v = stats[b.column]
        lo, hi = cis.get(ci_columns(b.column)[0], math.nan), cis.get(ci_columns(b.column)[1], math.nan)
        if math.isnan(lo) or math.isnan(hi):
            (fail if not v <= b.limit_ms else []).append(b.column)
        elif hi <= b.limit_ms:
            continue
        elif lo > b.limit_ms:
            fail.append(b.column)
        else:
            shown = "unbounded" if math.isinf(hi) else f"{hi:,.0f}"
            open_.append(f"{b.column} 95% batch-means interval {lo:,.0f}-{shown} ms straddles {b.limit_ms:g}")
    if max_util is not None:
        lo, hi = cis.get(UTIL_CI[0], math.nan), cis.get(UTIL_CI[1], math.nan)
        if math.isnan(lo) or math.isnan(hi):
            (fail if util > max_util else []).append("utilisation")
        elif lo > max_util:
            fail.append("utilisation")
        elif hi > max_util:
            open_.append(f"utilisation 95% batch-means interval {lo:.2f}-{hi:.2f} straddles {max_util:g}")
    if fail and not meets:
        return FAIL, ""
    if open_ or fail:  # a figure meeting its bound whose interval lies beyond it is not settled either
        return BORDERLINE, "; ".join(open_) or f"{', '.join(fail)}: the interval's figure and its batch means disagree"
    return (PASS, "") if meets else (FAIL, "")


def _lives_in(lives, lo: float, hi: float) -> tuple[float, float, int]:
    """(billed seconds, ready seconds, most replicas billed at once) inside [lo, hi)."""
    billed = ready = 0.0
    events = []
    for lf in lives:
        a, b = max(lf.requested_s, lo), min(lf.end_s, hi)
        if b > a:
            billed += b - a
            events += [(a, 1), (b, -1)]
        if lf.ready_s is not None:
            a2 = max(lf.ready_s, lo)
            if b > a2:
                ready += b - a2
    n = peak = 0
    for _, d in sorted(events):
        n += d
        peak = max(peak, n)
    return billed, ready, peak


def _counters_at(run: FleetRun, pool_idx: int) -> list:
    """Pool counters at every sample time, and at the end."""
    pts = [(s.t, s.busy_s, s.seq_steps, s.steps) for s in run.samples if s.pool == pool_idx]
    return pts + [(run.t_end, *run.pools[pool_idx].counters())]


def _delta(points: list, lo: float, hi: float) -> tuple[float, int, int]:
    """Counter growth between the samples nearest lo and hi (samples sit on interval edges)."""
    def at(t):
        best = points[0]
        for p in points:
            if p[0] <= t + 1e-6:
                best = p
        return best
    a, b = at(lo), at(hi)
    return b[1] - a[1], b[2] - a[2], b[3] - a[3]


def interval_rows(run: FleetRun, bounds: list[RequestBound], span_s: float, interval_s: float, *, max_utilisation: float | None = None,
                  idle_frac: float = IDLE_POWER_FRAC, start_s: float = 0.0) -> list[IntervalRow]:
    """Per pool and interval of [start_s, start_s + span_s) (and for the whole fleet when it has several
    pools). Arrivals before `start_s` are a warm-up: served, but neither counted, judged nor billed."""
    lat = _latencies(run)
    ok = np.ones(len(run.reqs), bool)
    for b in bounds:
        ok &= lat[b.metric] <= b.limit_ms
    ok &= np.isfinite(run.rec.finish_s)
    n_int = max(1, math.ceil(span_s / interval_s - 1e-9))
    rel = run.reqs.arrival_s - start_s
    k = np.where(rel >= 0, np.minimum((np.maximum(rel, 0.0) // interval_s).astype(np.int64), n_int - 1), -1)
    rows = []
    groups = [(p.spec.name, p.spec.hardware, p.spec.mode, [p], run.pool_of == p.index) for p in run.pools]
    if len(run.pools) > 1:
        groups.append(("fleet", "+".join(dict.fromkeys(p.spec.hardware for p in run.pools)), "+".join(dict.fromkeys(p.spec.mode for p in run.pools)),
                       run.pools, np.ones(len(run.reqs), bool)))
    for name, hw, mode, pools, member in groups:
        pts = {p.index: _counters_at(run, p.index) for p in pools}
        for j in range(n_int):
            lo, hi = start_s + j * interval_s, start_s + min((j + 1) * interval_s, span_s)
            sel = member & (k == j)
            rows.append(_row(run, name, hw, mode, pools, pts, j, lo, hi, sel, lat, ok, bounds, max_utilisation, idle_frac))
    return rows


def _row(run, name, hw, mode, pools, pts, j, lo, hi, sel, lat, ok, bounds, max_util, idle_frac) -> IntervalRow:
    length = max(hi - lo, 1e-9)
    billed = ready = 0.0
    peak = 0
    energy_j = cost = 0.0
    used = 0.0
    for p in pools:
        b, r, pk = _lives_in(p.lives.values(), lo, hi)
        u = p.utilisation(*_delta(pts[p.index], lo, hi), r)
        board = p.spec.profile.hardware_spec().board_power_w
        energy_j += r * power_w(board, u, idle_frac) + (b - r) * power_w(board, 0.0, idle_frac)
        cost += b / 3600 * p.spec.price()
        billed, ready, peak, used = billed + b, ready + r, peak + pk, used + u * r
    util = used / ready if ready > 0 else 0.0
    n = int(sel.sum())
    rej = run.rejected[sel]
    stats = {b.column: _stat(lat[b.metric][sel], b.stat) for b in bounds}
    meets = n > 0 and all(v <= b.limit_ms for b, v in zip(bounds, stats.values()))
    if max_util is not None:
        meets = meets and util <= max_util
    cis = {}
    for b in bounds:
        cis.update(zip(ci_columns(b.column), batch_interval(lat[b.metric][sel], b.stat, b.limit_ms)))
    if max_util is not None:
        cis.update(zip(UTIL_CI, _util_interval(run, pools, pts, lo, hi)))
    verdict, why = hour_verdict(stats, cis, bounds, meets, util, max_util) if n > 0 else (FAIL, "")
    good = int(ok[sel].sum())
    return IntervalRow(name, hw, mode, j, lo, hi, n / length, n, int((rej == REJECT_FULL).sum()), int((rej == REJECT_TIMEOUT).sum()),
                       int((~np.isfinite(run.rec.finish_s[sel]) & (rej == 0)).sum()), good / length, good / n if n else float("nan"), bool(meets),
                       util, billed / length, peak, billed / 3600, energy_j / 3.6e6, cost, {**stats, **cis}, verdict, why)


def _util_interval(run, pools, pts, lo: float, hi: float) -> tuple[float, float]:
    """The 95% t-interval of the interval's utilisation over BATCHES equal sub-windows (ready-time
    weighted over its pools, as the interval's own); (nan, nan) where the run sampled its counters
    less often than that or the fleet was not ready in two sub-windows."""
    width = (hi - lo) / BATCHES
    if run.sample_s > width * (1 + 1e-9):
        return math.nan, math.nan
    vals = []
    for k in range(BATCHES):
        a, b = lo + k * width, lo + (k + 1) * width
        used = ready = 0.0
        for p in pools:
            _, r, _ = _lives_in(p.lives.values(), a, b)
            used += p.utilisation(*_delta(pts[p.index], a, b), r) * r
            ready += r
        if ready > 0:
            vals.append(used / ready)
    return t_interval(np.array(vals)) if len(vals) >= 2 else (math.nan, math.nan)


@dataclass
class SpanSummary:
    """A pool (or the fleet) over the whole span, and that span repeated for a month."""

    pool: str
    hardware: str
    mode: str
    requests_arrived: int
    requests_rejected: int
    slo_attainment: float
    goodput_rps: float
    intervals_meeting_slo: int
    intervals: int
    replicas_max: int
    intervals_borderline: int
    intervals_failing: int
    gpu_hours: float
    energy_kwh: float
    cost_usd: float
    cost_usd_per_month: float
    energy_kwh_per_month: float


def summarise_span(rows: list[IntervalRow], span_s: float) -> list[SpanSummary]:
    df = pd.DataFrame([r.flat() for r in rows])
    per_month = DAYS_PER_MONTH * 86400 / span_s
    out = []
    for (pool, hw, mode), g in df.groupby(["pool", "hardware", "mode"], sort=False):
        n = int(g.requests_arrived.sum())
        good = float((g.goodput_rps * (g.end_s - g.start_s)).sum())
        out.append(SpanSummary(pool, hw, mode, n, int(g.requests_rejected.sum() + g.requests_timed_out.sum()), good / n if n else float("nan"),
                               good / span_s, int(g.meets_slo.sum()), len(g), int(g.replicas_max.max()),
                               int((g.slo_verdict == BORDERLINE).sum()), int((g.slo_verdict == FAIL).sum()), float(g.gpu_hours.sum()),
                               float(g.energy_kwh.sum()), float(g.cost_usd.sum()), float(g.cost_usd.sum()) * per_month,
                               float(g.energy_kwh.sum()) * per_month))
    return out

