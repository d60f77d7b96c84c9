"""One simulated point: `run_point` checks its inputs, draws the workload and runs the event loop
(sim.py) once.

Deterministic: the same arguments give identical results (the seed fixes arrivals, lengths,
regimes and every per-mode draw; nothing depends on wall time or process). The workload drawn for
a seed is the same for every mode and replica count, so modes and replica counts are compared on
the same requests. Cheap to call repeatedly: step prices are cached per profile object in the
process, and a grossly overloaded point stops early (abort_backlog_s).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel.errors import UserError
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.profile import Profile
from costmodel.schemas.results import PointSummary
from simulate.engine import EngineConfig
from simulate.routers import DEFAULT_ROUTER, check_router
from simulate.metrics import RequestRecords
from simulate.sim import simulate_records
from simulate.workload import Requests, Workload, build_requests, load_workload, with_burstiness

DEFAULT_WARMUP_FRAC = 0.1
DEFAULT_ABORT_BACKLOG_S = 60.0


if TYPE_CHECKING:
    import pandas as pd


@dataclass
class PointResult:
    summary: PointSummary
    records: RequestRecords  # costmodel.schemas.results.REQUEST_COLUMNS, per arrived request

    @cached_property
    def requests(self) -> "pd.DataFrame":
        """The per-request table, one row per arrived request (built on first use)."""
        return self.records.frame()


def resolve_workload(workload) -> Workload:
    if workload is None:
        return Workload()
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, (str, Path)):
        return load_workload(workload)
    raise UserError(f"workload {workload!r} is neither a Workload nor a file path", "pass a workload JSON path")


def resolve_engine(profile: Profile, engine) -> EngineConfig:
    if engine is None:
        return EngineConfig.for_profile(profile)
    if isinstance(engine, EngineConfig):
        return engine.validate()
    if isinstance(engine, dict):
        bad = set(engine) - set(EngineConfig.__dataclass_fields__)
        if bad:
            raise UserError(f"unknown engine setting(s) {', '.join(sorted(bad))}", f"settings are {', '.join(EngineConfig.__dataclass_fields__)}")
        return EngineConfig.for_profile(profile, **engine)
    raise UserError(f"engine {engine!r} is neither an EngineConfig nor a dict", "pass EngineConfig(max_num_seqs=..., ...)")


# The warm-up may leave out a share of the requests, never so many that the percentiles rest on a
# handful: at least this many (or half the run, for a run shorter than twice it) stay measured.
MIN_MEASURED = 10


def check_warmup_leaves(reqs, warmup_frac: float) -> None:
    """Refuse a warm-up share that leaves too few requests to measure (a p95 of one request)."""
    n = len(reqs.arrival_s)
    measured = int((reqs.arrival_s >= warmup_frac * reqs.window_s).sum())
    need = min(MIN_MEASURED, -(-n // 2))
    if measured < need:
        raise UserError(f"a warm-up share of {warmup_frac:g} leaves {measured} of the {n} requests measured, fewer than {need}",
                        "give a smaller --warmup (warmup_frac) or a longer run (--requests, --duration)")


def check_mode(profile: Profile, mode: "str | ServingMode") -> ServingMode:
    """The registered mode named `mode` (or the ServingMode itself, resolved at an edge), which the
    profile must carry: the one place simulate's entry points turn a mode name into its ServingMode
    (everything below takes the object)."""
    serving = mode if isinstance(mode, ServingMode) else get_mode(mode)
    profile.mode(serving.name)
    return serving


REQUESTS_MEMO_MAX = 64  # open-loop request sets kept per profile object in a process (a plan's replications reuse a few dozen)
REQUESTS_MEMO_MAX_LEN = 20_000  # ... each of at most this many requests (a plan's replication at 1,000 QPS); larger sets are drawn afresh


def _requests(profile: Profile, wl: Workload, qps, n_requests, duration_s, seed: int, concurrency) -> Requests:
    """build_requests, kept per profile object for open-loop runs: a plan simulates the same arrivals (common random
    numbers) for every replica count and mode of a GPU, and a point's requests are a pure function of these arguments.
    A kept set's arrays are read-only, since the runs share them; a closed loop writes its send times into arrival_s
    (sim.py), so it is drawn afresh."""
    if concurrency is not None:
        return build_requests(profile, wl, qps, n_requests=n_requests, duration_s=duration_s, seed=seed, concurrency=concurrency)
    from costmodel.stepcost.resolved import resolve

    key = (wl, qps, n_requests, duration_s, seed)
    memo = resolve(profile).memo("requests")
    try:
        hit = memo.get(key)
    except TypeError:  # a workload that does not hash (a trace's arrays): drawn afresh
        return build_requests(profile, wl, qps, n_requests=n_requests, duration_s=duration_s, seed=seed)
    if hit is None:
        hit = build_requests(profile, wl, qps, n_requests=n_requests, duration_s=duration_s, seed=seed)
        if len(hit) <= REQUESTS_MEMO_MAX_LEN:
            for a in (hit.arrival_s, hit.prompt_tokens, hit.output_tokens, hit.regime_idx):
                a.setflags(write=False)
            if len(memo) >= REQUESTS_MEMO_MAX:
                memo.clear()
            memo[key] = hit
    return hit


def run_point(profile: Profile, mode: "str | ServingMode", qps: float | None, *, replicas: int = 1, workload=None, duration_s: float | None = None,
              n_requests: int | None = None, seed: int = 0, engine=None, router: str = DEFAULT_ROUTER,
              warmup_frac: float = DEFAULT_WARMUP_FRAC, abort_backlog_s: float | None = DEFAULT_ABORT_BACKLOG_S,
              drain_s: float | None = None, miss_bounds: tuple = (), concurrency: int | None = None,
              burstiness: float | None = None) -> PointResult:
    """Simulate `replicas` replicas of `mode` serving `qps` requests/s (total, routed by `router`).

    Length: `n_requests` arrivals or `duration_s` seconds of arrivals (not both); with neither,
    300 s of arrivals, at least 1000 requests (a trace: the trace once). `qps` is None only for a
    workload replaying a trace at its recorded rate. `warmup_frac` of the arrival window is left
    out of percentiles and throughput. `abort_backlog_s`: stop (and report unstable) once a
    replica's queue holds that many seconds of its arrivals (None: never). `drain_s`: how long to
    run on after the last arrival (default max(120 s, the arrival window)). `miss_bounds`
    (sim.MissBound, ...): stop as soon as one is certainly missed (reported unstable, the reason
    starting sim.MISS_STOP); plan's replica search passes its SLO's percentile bounds.
    `concurrency` N: closed-loop clients, at most N requests in flight (vllm bench serve
    --max-concurrency N; with `qps` None, no rate limit: each finish sends the next request);
    latencies run from each request's send. `burstiness` B: gamma arrival gaps of shape B, as
    vllm bench serve --burstiness (1: Poisson; workload.with_burstiness)."""
    if not isinstance(profile, Profile):
        raise UserError(f"profile {profile!r} is not a Profile", "load one with costmodel.schemas.profile.Profile.load or costmodel.shipped.resolve_profile")
    serving = check_mode(profile, mode)
    if isinstance(replicas, bool) or not isinstance(replicas, numbers.Integral) or replicas < 1:
        raise UserError(f"replicas {replicas!r} must be an integer >= 1", "e.g. --replicas 2")
    replicas = int(replicas)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise UserError(f"seed {seed!r} must be an integer >= 0", "e.g. --seed 1")
    seed = int(seed)
    check_router(router)
    if not 0 <= warmup_frac < 1:
        raise UserError(f"warm-up fraction {warmup_frac!r} must be in [0, 1)", "e.g. 0.1")
    if abort_backlog_s is not None and abort_backlog_s <= 0:
        raise UserError(f"abort_backlog_s {abort_backlog_s!r} must be > 0 or None", "e.g. 60")
    if drain_s is not None and drain_s < 0:
        raise UserError(f"drain_s {drain_s!r} must be >= 0", "e.g. 120")
    wl = resolve_workload(workload)
    if burstiness is not None:
        wl = with_burstiness(wl, burstiness)
    cfg = resolve_engine(profile, engine)
    reqs = _requests(profile, wl, qps, n_requests, duration_s, seed, concurrency)
    check_warmup_leaves(reqs, warmup_frac)
    desc = wl.describe(reqs.concurrency, rate_limited=reqs.qps != math.inf)
    (summary, records), _ = simulate_records(profile, serving, reqs, replicas=replicas, cfg=cfg, router=router, seed=seed, warmup_frac=warmup_frac,
                                             abort_backlog_s=abort_backlog_s, drain_s=drain_s, workload_desc=desc, miss_bounds=miss_bounds)
    return PointResult(summary, records)
