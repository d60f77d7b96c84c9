"""A plan point's SLO verdict, settled over replications instead of read off one window.

One (GPU, mode, QPS, replicas) point is simulated in independent replications (replication i of
plan --seed s runs the simulator's seed REPLICATION_STRIDE*s + i, so that every option at a load -
each GPU, mode and replica count - serves the same arrivals and lengths in replication i: common
random numbers). After each replication every SLO figure (each bound's percentile column) gets a
95% t-interval of its mean over the replications (widened for the repeated looks: Bonferroni over
the replication cap, so that the verdict errs less than 5%), and stability the 95% t-interval of the
replications' backlog growth against its limit (costmodel/costing/verdict.py judges them):

- pass: every interval lies wholly below its bound, every replication stable (>= MIN_REPLICATIONS);
- fail: an interval lies wholly above its bound (a replication the simulator stopped early, missing
  it for certain, counts at the bound), every one of >= ALL_MISS_REPLICATIONS replications missed it,
  or arrivals outpaced service in every one (>= 2);
- a verdict that rests on the queue's growth alone (replications that disagree on stability, or all
  unstable while every latency bound holds: a short window cannot tell a queue that fills slowly from
  one that grows) starts again in windows 4x as long, up to 480 s, and is judged there;
- otherwise one more replication, up to the cap; then BORDERLINE with the intervals.

The window of one replication follows from the load: long enough for MIN_REQUESTS arrivals (a p95
resting on >= 15 requests above it), within [MIN_WINDOW_S, MAX_WINDOW_S]; the point's simulated
time is then as long as its verdict needs (replications x window), not a fixed 60 s.
"""

from __future__ import annotations

import math
import re
from typing import Callable

from costmodel.intervals import t_quantile
from costmodel.costing.verdict import BORDERLINE, FAIL, PASS, STABILITY, ci_columns, judge
from costmodel.slo import Slo
from simulate.sim import MISS_STOP

MIN_REPLICATIONS = 2  # a t-interval of the mean (1 degree of freedom: t = 12.7) at least before a pass
ALL_MISS_REPLICATIONS = 5  # every one of at least this many missing a bound settles a fail (a sign test: 1/32 < 5%)
DEFAULT_MAX_REPLICATIONS = 6  # then the point is BORDERLINE (plan --max-replications)
REPLICATION_STRIDE = 1000  # replication i of --seed s simulates seed s * 1000 + i (disjoint between seeds below the stride)
MIN_REQUESTS = 300
MIN_WINDOW_S, MAX_WINDOW_S = 20.0, 120.0
WINDOW_GROWTH = 4  # a verdict resting on the queue's growth alone starts again in windows this many times as long
MAX_STABILITY_WINDOW_S = 480.0  # ... up to this window; then the interval of their mean growth decides, or BORDERLINE

# (qps, replicas, seed, duration_s) -> a flat PointSummary row
RepFn = Callable[[float, int, int, float], dict]


def replication_seed(seed: int, i: int) -> int:
    return int(seed) * REPLICATION_STRIDE + int(i)


def window_s(qps: float, duration_s: float | None = None) -> float:
    """One replication's arrival window: `duration_s` when given, else MIN_REQUESTS arrivals' worth within the bounds."""
    if duration_s is not None:
        return float(duration_s)
    return float(min(MAX_WINDOW_S, max(MIN_WINDOW_S, math.ceil(MIN_REQUESTS / qps))))


def _interval(values: list[float | None], limit: float, looks: int = 1) -> tuple[float, float]:
    """(low, high) of the mean's t-interval. A replication stopped early (value None: it missed for
    certain) counts at the bound for the low end and leaves the high end unbounded; where every
    replication missed (at least ALL_MISS_REPLICATIONS: a sign test at 97%) the interval is [the
    lowest figure, unbounded]."""
    k = len(values)
    if k < 2:
        return -math.inf, math.inf
    known = [v for v in values if v is not None]
    if k >= ALL_MISS_REPLICATIONS and all(v > limit for v in known):
        return max(min(known, default=limit), math.nextafter(limit, math.inf)), math.inf
    vals = [limit if v is None else v for v in values]
    mean = sum(vals) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (k - 1))
    half = t_quantile(k - 1, looks) * sd / math.sqrt(k)
    return mean - half, (mean + half if len(known) == k else math.inf)


_LIMIT = re.compile(r"limit (\d+(?:\.\d+)?)\)")


def growth_ratio(rep: dict) -> float | None:
    """A replication's backlog growth as a share of the limit its stability test used (simulate/metrics.py:
    stable below 1); None where the replication was unstable for another reason (stopped early, aborted,
    requests left unfinished): above the limit for certain."""
    if str(rep.get("stability_reason", "")).startswith(MISS_STOP):
        return math.nan  # stopped at a certain latency miss: its queue's stability was not watched (the latency figure counts it)
    m = _LIMIT.search(str(rep.get("stability_reason", "")))
    g = rep.get("backlog_growth")
    if m is None or g is None or not math.isfinite(float(g)) or float(m.group(1)) <= 0:
        return 0.0 if rep.get("stable") else None
    if not rep.get("stable") and "backlog grew" not in str(rep.get("stability_reason", "")):
        return None
    return float(g) / float(m.group(1))


_NOT_AVERAGED = frozenset(("seed", "replicas", "qps", "duration_s"))


def _means(reps: list[dict]) -> dict:
    """The first replication's row with each number (not a bool, not _NOT_AVERAGED) replaced by its mean over the
    replications' finite values (kept where none is finite). A plain loop: the plan's chains call it after every
    replication, in the plan's own process."""
    row = dict(reps[0])
    isfinite = math.isfinite
    for key, v in reps[0].items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or key in _NOT_AVERAGED:
            continue
        total, n = 0, 0
        for r in reps:
            x = r.get(key)
            if isinstance(x, (int, float)) and not isinstance(x, bool) and isfinite(x):
                total += float(x)
                n += 1
        if n:
            row[key] = total / n
    return row


def aggregate(reps: list[dict], slo: Slo, looks: int = 1) -> dict:
    """One point row from its replications' rows: numbers averaged over the replications, `replications`,
    `stable_replications`, `stable` (every one), `duration_s` (one replication's window),
    `simulated_window_s` (all of them), and per SLO bound its mean's interval (ci_columns)."""
    row = _means(reps)
    k = len(reps)
    stopped = [str(r.get("stability_reason", "")).startswith(MISS_STOP) for r in reps]
    row["replications"] = k
    row["stable_replications"] = sum(bool(r.get("stable")) for r in reps)
    row["stable"] = row["stable_replications"] == k
    if not row["stable"]:
        row["stability_reason"] = next(str(r.get("stability_reason", "")) for r in reps if not r.get("stable"))
    row["simulated_window_s"] = sum(float(r.get("duration_s") or 0.0) for r in reps)
    ratios = [x for x in (growth_ratio(r) for r in reps) if x is None or not math.isnan(x)]
    row["stopped_replications"] = sum(stopped)
    row["aborted_replications"] = sum(str(r.get("stability_reason", "")).startswith("aborted") for r in reps)
    lo_col, hi_col = ci_columns(STABILITY)
    row[lo_col], row[hi_col] = _interval(ratios, 1.0)  # one look: a window's own stability test already errs towards unstable
    known = [v for v in ratios if v is not None]
    row[STABILITY] = sum(known) / len(known) if known else math.nan
    row["stable"] = row["stable"] or row[hi_col] <= 1.0  # the replications' mean growth lies below the limit
    row["seed"] = reps[0].get("seed")
    for b in slo.bounds:
        vals = [None if s else r.get(b.column) for r, s in zip(reps, stopped)]
        vals = [None if v is None or not math.isfinite(float(v)) else float(v) for v in vals]
        lo_col, hi_col = ci_columns(b.column)
        row[lo_col], row[hi_col] = _interval(vals, b.limit_ms, looks)
        known = [v for v in vals if v is not None]
        row[b.column] = sum(known) / len(known) if known else row.get(b.column)
    return row


def certain_replications(qps: float, seed: int, duration_s: float | None, max_replications: int) -> list[tuple[int, float]]:
    """(seed, window) of the replications a point's verdict needs for certain, whatever they show: its first MIN_REPLICATIONS
    in the window its load gives (settled_point tells `ahead` of these; a plan submits its chains' first ones early)."""
    w = window_s(qps, duration_s)
    return [(replication_seed(seed, i), w) for i in range(min(MIN_REPLICATIONS, max_replications))]


def settled_point(run: RepFn, qps: float, replicas: int, slo: Slo, seed: int, duration_s: float | None = None,
                  max_replications: int = DEFAULT_MAX_REPLICATIONS, ahead: RepFn | None = None, maybe: RepFn | None = None) -> dict:
    """Replications of one point until its verdict is settled or `max_replications` ran: the
    aggregated row with `slo_verdict` (pass, fail, or borderline) and `slo_meets_on_mean`. Where only
    the queue's growth is in doubt the window is too short to tell a queue that fills slowly from one
    that grows: the point starts again in windows WINDOW_GROWTH times as long, up to
    MAX_STABILITY_WINDOW_S (a window given as `duration_s` is kept). `ahead(qps, replicas, seed,
    window)`, where given, is told of the replications a window needs for certain (its first
    MIN_REPLICATIONS) before `run` is asked for them one by one: a pool may run them side by side; `maybe`,
    where given, of the replication after the next one whenever a look leaves the verdict open (it may be
    needed: a pool may run it where a worker would idle). Neither changes which replications the verdict reads."""
    w = window_s(qps, duration_s)
    while True:
        longer = duration_s is None and w < MAX_STABILITY_WINDOW_S
        if ahead is not None:
            for rep_seed, _ in certain_replications(qps, seed, duration_s, max_replications):
                ahead(qps, replicas, rep_seed, w)
        reps, row, v = _replications(run, qps, replicas, slo, seed, w, max_replications, longer, ahead, maybe)
        if not (longer and v.stability_open):
            break
        w = min(MAX_STABILITY_WINDOW_S, w * WINDOW_GROWTH)
    row["slo_verdict"] = v.status if v.status != PASS or len(reps) >= MIN_REPLICATIONS else BORDERLINE
    row["slo_meets_on_mean"] = v.meets_on_mean
    return row


def _replications(run: RepFn, qps: float, replicas: int, slo: Slo, seed: int, w: float, max_replications: int,
                  longer: bool, ahead: RepFn | None = None, maybe: RepFn | None = None) -> tuple[list[dict], dict, object]:
    """Replications in windows of `w` seconds until the verdict settles, the cap, or (when a `longer`
    window may follow) only the queue's growth is in doubt: (the replications, their row, its verdict).
    Once a replication stopped early (a certain miss: the point can no longer pass), `ahead` is told of
    the replications up to ALL_MISS_REPLICATIONS, which it then almost surely needs (a fail settled
    sooner needs an interval wholly above its bound)."""
    reps: list[dict] = []
    told = MIN_REPLICATIONS
    while True:
        reps.append(run(qps, replicas, replication_seed(seed, len(reps)), w))
        row = aggregate(reps, slo, looks=max(1, max_replications - 1))  # a look after each replication from the second
        v = judge(row, slo)
        if (longer and v.stability_open) or v.status == FAIL or (v.status == PASS and len(reps) >= MIN_REPLICATIONS) \
                or len(reps) >= max_replications:
            return reps, row, v
        if ahead is not None and row.get("stopped_replications"):
            for i in range(max(told, len(reps)), min(ALL_MISS_REPLICATIONS, max_replications)):
                ahead(qps, replicas, replication_seed(seed, i), w)
            told = max(told, ALL_MISS_REPLICATIONS)
        if maybe is not None and len(reps) + 1 < max_replications:  # the verdict is open: the next one runs, and the one after may
            maybe(qps, replicas, replication_seed(seed, len(reps) + 1), w)
