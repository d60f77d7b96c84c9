"""`costmodel plan`: the fewest replicas meeting an SLO for every (hardware, mode, QPS), found by
galloping + bisection on replicas (simulate.plan.search) with the simulator as the judge, then priced
(costmodel.costing): monthly cost, cheapest option per QPS, the crossover.

Work split: one chain per (hardware, mode) walks its QPS points upwards, each search starting
from the answer at the QPS below (needing more load never needs fewer replicas). On this machine's
cores every chain searches in a thread of the plan's process and each replication is one job on
forked workers (PooledReplications: no worker idles while a replication is left to run, and none
is simulated twice); on --scheduler, one Dask job per chain (simulate.parallel.run_tasks). A QPS whose
lower neighbour needed more than --max-replicas is skipped (it cannot need fewer) and says so.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

from costmodel.errors import UserError
from costmodel.modes import get_mode
from costmodel.shipped import resolve_profile
from costmodel.slo import Slo, parse_slo
from costmodel.costing.verdict import BORDERLINE, FAIL, PASS, judge
from simulate.plan.search import fewest_replicas, first_probe
from simulate.plan.settle import certain_replications, settled_point
from simulate.api import resolve_workload, run_point
from simulate.sim import MISS_METRICS, MISS_STOP, MissBound
from simulate.parallel import AffinityPool, Workers, cores, run_tasks

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class PlanSettings:
    qps: list[float]
    slo: str
    hardware: list[str]
    modes: list  # ServingMode objects (resolved at the edge; names are accepted and resolved here)
    profiles: dict[str, str | None]  # hardware -> profile path (None: the shipped default)
    duration_s: float | None  # one replication's arrival window (None: settle.window_s, from the load)
    seed: int = 0
    max_replicas: int = 64
    jobs: int = 1
    workload: str | None = None  # workload JSON path (None: the simulator's default workload)
    refine_crossover: int = 0  # bisection steps of the crossover at most (the QPS they simulate are appended to qps)
    engine: dict | None = None  # engine settings given for every point (e.g. enable_prefix_caching); None: the defaults
    crossover_search_qps: list[float] = field(default_factory=list)  # the QPS of qps the crossover's bisection added (not asked about)
    max_replications: int = 1  # replications a point may take to settle its verdict (simulate/plan/settle.py; 1: one window, judged as it is)

    def __post_init__(self):
        self.modes = [get_mode(m) if isinstance(m, str) else m for m in self.modes]

    @property
    def mode_names(self) -> list[str]:
        return [m.name for m in self.modes]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["modes"] = self.mode_names
        if d["engine"] is None:
            del d["engine"]  # a plan with the default engine records what it did before the setting existed
        return d


@dataclass
class CellSearch:
    """The search of one (hardware, mode, QPS) cell."""

    hardware: str
    mode: str
    qps: float
    replicas: int | None  # fewest whose SLO verdict is a settled pass; None when none <= max_replicas is (or skipped)
    probes: list[tuple[int, bool]] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)  # flat PointSummary rows of every probe (over its replications)
    note: str = ""  # why a cell was not searched
    verdicts: dict = field(default_factory=dict)  # replicas -> pass | fail | borderline (costmodel/costing/verdict.py)
    replicas_low: int | None = None  # fewest not settled to miss (below `replicas` only where the counts between are borderline)


# A point evaluator: (hardware, mode, qps, replicas) -> flat PointSummary row
PointFn = Callable[[str, str, float, int], dict]


@dataclass(frozen=True)
class ChainStart:
    """What is known before a chain's first QPS: its answer lies in [lower, upper], and `prev_qps`
    (the QPS whose answer `lower` is) scales the first guess."""

    lower: int = 1
    upper: int | None = None
    prev_qps: float | None = None
    upper_qps: float | None = None  # where given: `upper` settled to pass at this higher QPS, so it passes here too (more load never
    #                                needs fewer replicas) and is pinned, not simulated (a crossover probe with a price independent of utilisation)


@dataclass
class _Loads:
    """The smallest per-replica load (QPS / replicas) that missed the SLO at the chain's last
    searched QPS (inf: none missed there)."""

    fail: float = math.inf

    def guess(self, qps: float, lower: int, prev_qps: float | None) -> int:
        """The first replica count to try at `qps` (the search then gallops and bisects from it, so
        a guess changes how many simulations a cell takes, not its answer). After a miss at the
        QPS below: the fewest replicas that keep the per-replica load below that missing load
        (larger pools serve more per replica, so this is usually the answer or one above it).
        Otherwise between the answer below (a lower bound) and that answer scaled by the load
        ratio (exact when capacity binds, high when latency does): their geometric mean."""
        if math.isfinite(self.fail) and self.fail > 0:
            return max(lower, math.floor(qps / self.fail) + 1)
        if not prev_qps:
            return lower
        high = math.ceil(lower * qps / prev_qps)
        return max(lower, round(math.sqrt(lower * high)))


def search_chain(point: PointFn, hardware: str, mode: str, qps_values, slo: Slo, max_replicas: int,
                 start: ChainStart = ChainStart()) -> list[CellSearch]:
    """Search each QPS of one (hardware, mode) in ascending order, each starting at the previous
    answer, the first guess from the per-replica loads seen so far (_Loads.guess). A count meets
    the SLO where its verdict is a settled pass; below the fewest that does, the counts whose
    verdict is borderline are probed down to the first settled miss (CellSearch.replicas_low)."""
    out: list[CellSearch] = []
    lower, prev_q = start.lower, start.prev_qps
    loads = _Loads()
    for i, q in enumerate(sorted(qps_values)):
        seen = _Loads()  # this QPS's misses guide the next QPS's first guess
        if lower is None:
            out.append(CellSearch(hardware, mode, q, None, note=none_fits(max_replicas, prev_q)))
            continue
        cell = CellSearch(hardware, mode, q, None)

        def evaluate(r: int, q=q, cell=cell, first=i == 0):
            if first and start.upper_qps is not None and start.upper is not None and r >= start.upper:
                why = f"not simulated: {start.upper} replica{'s' if start.upper != 1 else ''} settled to pass at {start.upper_qps:g} QPS, a higher load"
                cell.points.append(pinned_row(hardware, mode, q, r, why, slo.text))
                cell.verdicts[r] = PASS
                return True, None
            row = point(hardware, mode, q, r)
            cell.points.append(row)
            status = judge(row, slo).status
            cell.verdicts[r] = status
            ok = status == PASS
            if status == FAIL:
                seen.fail = min(seen.fail, q / r)
            hint = None
            thr = row.get("throughput_rps") or 0.0
            stopped = str(row.get("stability_reason", "")).startswith(MISS_STOP)  # stopped early: its throughput is partial
            if not ok and not row.get("stable", True) and thr > 0 and not stopped:
                hint = math.ceil(q / (thr / r))  # offered load / served load per replica
            return ok, hint

        guess = _first_guess(loads, q, lower, prev_q, start.upper if i == 0 else None)
        top = max_replicas
        res = fewest_replicas(evaluate, lower=lower, max_replicas=top, start=min(guess, top))
        cell.replicas, cell.probes = res.replicas, res.probes
        low = res.replicas if res.replicas is not None else top + 1
        while low - 1 >= lower and cell.verdicts.get(low - 1, None) != FAIL:
            if low - 1 not in cell.verdicts:
                evaluate(low - 1)
                cell.probes.append((low - 1, False))
            if cell.verdicts[low - 1] != BORDERLINE:
                break
            low -= 1
        cell.replicas_low = low if low <= top else None
        out.append(cell)
        lower, prev_q, loads = cell.replicas_low, q, seen
    return out


def _first_guess(loads: _Loads, qps: float, lower: int, prev_qps: float | None, upper: int | None) -> int:
    """A QPS's first guess (_Loads.guess); `upper`, the answer at a higher QPS where the chain starts below one, bounds it (a first
    guess, not a cap: a verdict here may be borderline where the higher load's settled)."""
    guess = loads.guess(qps, lower, prev_qps)
    return guess if upper is None else min(guess, upper)


def first_point(chain: "Chain", max_replicas: int) -> int | None:
    """The replica count search_chain simulates first on `chain` (its first QPS's first probe), None where that count is pinned
    (not simulated: ChainStart.upper_qps)."""
    s = chain.start
    if s.lower is None:
        return None
    r = first_probe(s.lower, max_replicas, min(_first_guess(_Loads(), min(chain.qps), s.lower, s.prev_qps, s.upper), max_replicas))
    return None if s.upper_qps is not None and s.upper is not None and r >= s.upper else r


def pinned_cell(hardware: str, mode: str, qps: float, below: CellSearch, above: CellSearch, slo_text: str) -> CellSearch:
    """A crossover-search cell not simulated: its chain's settled count is the same at the QPS below and
    above (none borderline), and more load never needs fewer replicas, so the count here is that one.
    Its row carries the count and the verdict, no figures (it prices a fleet, it measured nothing)."""
    r = below.replicas
    why = f"not simulated: {r} replica{'s' if r != 1 else ''} settled at both {below.qps:g} and {above.qps:g} QPS"
    row = pinned_row(hardware, mode, qps, r, why, slo_text)
    return CellSearch(hardware, mode, qps, r, [(r, True)], [row], verdicts={r: PASS}, replicas_low=r)


def pinned_row(hardware: str, mode: str, qps: float, replicas: int, why: str, slo_text: str) -> dict:
    """The row of a count passed by inference, not simulated (`why`): the count and the verdict, no figures."""
    return {"hardware": hardware, "mode": mode, "qps": qps, "replicas": replicas, "stable": True, "stability_reason": why,
            "slo_verdict": PASS, "slo_pinned": why, "slo_pinned_for": slo_text, "replications": 0}


def none_fits(max_replicas: int, at_qps: float | None) -> str:
    """Why a cell was not searched: no fleet fits at a lower load, so none fits at this one."""
    where = f" at {at_qps:g} QPS" if at_qps is not None else ""
    return (f"no fleet of up to {max_replicas} replicas meets the SLO: none does{where} already, and more load never needs fewer "
            "(raise --max-replicas to search further)")


def miss_bounds(slo: Slo) -> tuple[MissBound, ...]:
    """The SLO's percentile bounds on queue, TTFT or E2E as the simulator's MissBounds: a simulation
    given them stops as soon as one is certainly missed (the others, tpot and means, never stop it)."""
    return tuple(MissBound(b.metric, float(b.stat[1:]), b.limit_ms) for b in slo.bounds
                 if b.metric in MISS_METRICS and b.stat.startswith("p"))


def simulator_point(profile, duration_s: float | None, seed: int, workload: str | None = None, miss_bounds: tuple = (), engine: dict | None = None) -> PointFn:
    """A PointFn that runs the discrete-event simulator on `profile` (with `engine` settings over the
    defaults) once, for `duration_s` seconds of arrivals drawn with `seed`; a point that certainly
    misses one of `miss_bounds` (the SLO's percentile bounds) stops early, reported unstable."""
    wl = resolve_workload(workload)

    def point(hardware: str, mode, qps: float, replicas: int) -> dict:
        return run_point(profile, mode, qps, replicas=replicas, workload=wl, duration_s=duration_s, seed=seed,
                         miss_bounds=miss_bounds, engine=engine).summary.flat()

    return point


def replicated_point(profile, duration_s: float | None, seed: int, workload: str | None, bounds: tuple, engine: dict | None, slo: Slo,
                     max_replications: int) -> PointFn:
    """A PointFn whose point runs in replications until its SLO verdict settles (simulate/plan/settle.py:
    replication i runs simulator_point with seed 1000*seed + i, the same for every option); with
    `max_replications` 1, one window of `seed`, judged as it is."""
    if max_replications <= 1:
        return simulator_point(profile, duration_s, seed, workload, bounds, engine)
    made: dict = {}
    done = _simulated(profile, workload, bounds, engine)

    def point(hardware: str, mode, qps: float, replicas: int) -> dict:
        def once(q: float, r: int, rep_seed: int, window_s: float) -> dict:
            key = (getattr(mode, "name", mode), float(q), int(r), rep_seed, float(window_s))
            row = done.get(key)
            if row is not None:
                return dict(row)
            fn = made.get((rep_seed, window_s))
            if fn is None:
                fn = made[(rep_seed, window_s)] = simulator_point(profile, window_s, rep_seed, workload, bounds, engine)
            row = done[key] = fn(hardware, mode, q, r)
            return dict(row)

        return settled_point(once, qps, replicas, slo, seed, duration_s, max_replications)

    return point


SIMULATED_MAX = 4096  # replications kept per (profile, workload, SLO bounds, engine) in a worker process


def _simulated(profile, workload, bounds: tuple, engine: dict | None) -> dict:
    """The replications this process already simulated for one profile object, workload, SLO bounds
    and engine settings, keyed by (mode, QPS, replicas, replication seed, window): a replica search,
    a crossover round or a later chain in the same worker that asks for one again reuses it (a run is
    a pure function of these). Kept on the profile's resolution (dropped with the profile)."""
    from costmodel.stepcost.resolved import resolve

    memo = resolve(profile).memo("plan-replications")
    key = (str(workload), tuple(bounds), repr(sorted((engine or {}).items())))
    done = memo.get(key)
    if done is None or len(done) >= SIMULATED_MAX:
        done = memo[key] = {}
    return done


@lru_cache(maxsize=16)
def process_profile(profile_path: str | None, hardware: str):
    """One profile object per (path, GPU) in a worker process: its step prices stay cached across jobs
    (the plan's chains, the day's fleets and hour jobs)."""
    return resolve_profile(profile_path, hardware)


def _chain_job(hardware, mode, qps_values, profile_path, slo_text, duration_s, seed, max_replicas, workload, start, engine=None,
               max_replications=1) -> list[CellSearch]:
    profile = process_profile(profile_path, hardware)
    slo = parse_slo(slo_text)
    point = replicated_point(profile, duration_s, seed, workload, miss_bounds(slo), engine, slo, max_replications)
    return search_chain(point, hardware, getattr(mode, "name", mode), qps_values, slo, max_replicas, start)


@dataclass(frozen=True)
class Chain:
    """One replica-search chain to run: a (hardware, mode) over some QPS, with what is known before it."""

    hardware: str
    mode: object  # a ServingMode
    qps: tuple
    start: ChainStart = ChainStart()


def run_searches(settings: PlanSettings, progress: Callable[[str], None] | None = None, qps=None,
                 starts: dict | None = None, skip: dict | None = None, scheduler: str | None = None, pool=None,
                 meanwhile: Callable[[], None] | None = None) -> list[CellSearch]:
    """Every (hardware, mode) chain over `qps` (default settings.qps), on `scheduler` (None: a
    local cluster of settings.jobs workers; serially for one job or settings.jobs == 1); `starts[(hardware, mode)]` is a ChainStart (bounds known from other QPS);
    `skip[(hardware, mode)]` is a note for a chain that needs no search; `meanwhile()`: run_chains's."""
    qps_values = tuple(qps if qps is not None else settings.qps)
    skip = skip or {}
    chains = [Chain(h, m, qps_values, (starts or {}).get((h, m.name), ChainStart()))
              for h in settings.hardware for m in settings.modes if (h, m.name) not in skip]
    cells: list[CellSearch] = [CellSearch(h, m, q, None, note=note) for (h, m), note in skip.items() for q in qps_values]
    return cells + run_chains(settings, chains, progress, scheduler, pool, meanwhile)


def run_chains(settings: PlanSettings, chains: list[Chain], progress: Callable[[str], None] | None = None, scheduler: str | None = None,
               pool=None, meanwhile: Callable[[], None] | None = None) -> list[CellSearch]:
    """The chains in parallel: with `pool` a PooledReplications, every chain searches in a thread of
    this process and each replication runs on the pool's forked workers (both cores busy to the last
    replication, each replication simulated once in the whole plan); else one job per chain, on a
    persistent ProcessPool of forked processes when given (simulate/parallel.py), or on Dask.
    `meanwhile()` runs in this thread once the chains' first replications are submitted and their threads started
    (what the caller loads while the workers simulate: the workers were forked without it)."""
    if isinstance(pool, PooledReplications) and scheduler is None and chains:
        return _threaded_chains(settings, chains, progress, pool, meanwhile)
    if isinstance(pool, PooledReplications):
        pool = None
    if meanwhile is not None:
        meanwhile()
    jobs = [(c.hardware, c.mode, list(c.qps), settings.profiles.get(c.hardware), settings.slo, settings.duration_s, settings.seed,
             settings.max_replicas, settings.workload, c.start, settings.engine, settings.max_replications) for c in chains]
    cells: list[CellSearch] = []
    t0 = time.perf_counter()

    def done(chain: list[CellSearch]):
        if progress and chain:
            c = chain[0]
            got = ", ".join(f"{x.qps:g}->{x.replicas if x.replicas is not None else '-'}" for x in chain)
            progress(f"{c.hardware}/{c.mode}: replicas per QPS {got} ({sum(len(x.probes) for x in chain)} points, "
                     f"{sum(int(p.get('replications', 1)) for x in chain for p in x.points)} simulations, {time.perf_counter() - t0:.1f} s)")

    # longest chains first (each mode's sim_cost_rank: MTP prices three passes per step shape), so the workers drain evenly
    jobs.sort(key=lambda j: (j[1].sim_cost_rank, -max(j[2])))
    # on one machine, forked processes (no Dask start-up: the plan is interactive); on --scheduler, Dask
    cluster = Workers(scheduler, settings.jobs, local="processes")
    for chain in run_tasks(_chain_job, jobs, cluster=cluster, on_done=lambda i, chain: done(chain), pool=pool):
        cells.extend(chain)  # in job order, whichever finished first
    return cells


class PooledReplications:
    """Every replication a plan asks for, as a future on an AffinityPool of forked workers (each
    (GPU, mode) kept on its home worker, where its step prices are cached): a replication asked for
    again - by another probe, round or chain - is simulated once for the whole plan (a run is a pure
    function of its key), and a point's first MIN_REPLICATIONS replications run side by side."""

    def __init__(self, settings: PlanSettings, workers: int):
        import threading

        self.settings = settings
        self.pool = AffinityPool(workers)
        self.futures: dict = {}  # (hardware, mode, qps, replicas, seed, window) -> Future of the flat row
        self.spares: dict = {}  # those of them submitted as spare jobs and not asked for since (AffinityPool)
        self._lock = threading.Lock()
        self.bounds = miss_bounds(parse_slo(settings.slo))

    def __enter__(self) -> "PooledReplications":
        for h in self.settings.hardware:  # loaded before the fork: every worker inherits the profiles
            process_profile(self.settings.profiles.get(h), h)
        self.pool.start()
        return self

    def __exit__(self, *exc) -> None:
        self.pool.close(cancel=exc[0] is not None)

    def future(self, hardware: str, mode: str, qps: float, replicas: int, seed: int, window_s: float | None, spare: bool = False):
        """The Future of one replication, submitted once; `spare`: one that may be needed (run where a worker would
        idle), made an ordinary job when it is asked for without."""
        s = self.settings
        key = (hardware, mode, float(qps), int(replicas), int(seed), window_s)
        with self._lock:
            fut = self.futures.get(key)
            if fut is None:
                fut = self.futures[key] = self.pool.submit((hardware, mode), _replication_job, hardware, s.profiles.get(hardware), mode, float(qps),
                                                           int(replicas), int(seed), window_s, s.workload, self.bounds, s.engine, spare=spare)
                if spare:
                    self.spares[key] = fut
            elif not spare and self.spares.pop(key, None) is not None:
                self.pool.promote(fut)
        return fut

    def first_replications(self, chains: list[Chain]) -> None:
        """Submit the replications each chain's search asks for first, whatever they show (first_point's, certain_replications's):
        its thread finds them running or done."""
        s = self.settings
        for c in chains:
            r = first_point(c, s.max_replicas)
            if r is None:
                continue
            q = min(c.qps)
            for seed, w in (certain_replications(q, s.seed, s.duration_s, s.max_replications) if s.max_replications > 1 else [(s.seed, s.duration_s)]):
                self.future(c.hardware, c.mode.name, q, r, seed, w)

    def drop_spares(self, hardware: str, mode: str, qps: float, replicas: int) -> None:
        """A point's verdict settled: its spare replications not started are not run (nor kept: asked for again, one runs)."""
        point = (hardware, mode, float(qps), int(replicas))
        with self._lock:
            for key in [k for k in self.spares if k[:4] == point]:
                if self.spares.pop(key).cancel():
                    del self.futures[key]

    def point(self, slo: Slo) -> PointFn:
        """A PointFn settling each point's verdict over replications run on the pool (as replicated_point does in one process)."""
        s = self.settings

        def point(hardware: str, mode, qps: float, replicas: int) -> dict:
            name = getattr(mode, "name", mode)
            if s.max_replications <= 1:
                return dict(self.future(hardware, name, qps, replicas, s.seed, s.duration_s).result())

            def once(q: float, r: int, rep_seed: int, window_s: float) -> dict:
                return dict(self.future(hardware, name, q, r, rep_seed, float(window_s)).result())

            def ahead(q: float, r: int, rep_seed: int, window_s: float) -> None:
                self.future(hardware, name, q, r, rep_seed, float(window_s))

            def maybe(q: float, r: int, rep_seed: int, window_s: float) -> None:
                self.future(hardware, name, q, r, rep_seed, float(window_s), spare=True)

            try:
                return settled_point(once, qps, replicas, slo, s.seed, s.duration_s, s.max_replications, ahead=ahead, maybe=maybe)
            finally:
                self.drop_spares(hardware, name, qps, replicas)

        return point


def _replication_job(hardware: str, profile_path: str | None, mode: str, qps: float, replicas: int, seed: int, window_s: float | None,
                     workload: str | None, bounds: tuple, engine: dict | None) -> dict:
    """One replication on a worker: simulator_point's row (the worker's profile object keeps its step prices across jobs)."""
    profile = process_profile(profile_path, hardware)
    return simulator_point(profile, window_s, seed, process_workload(workload), bounds, engine)(hardware, mode, qps, replicas)


@lru_cache(maxsize=8)
def process_workload(path: str | None):
    """One Workload per file in a worker process: a workload (a trace) read once, not once per replication."""
    return resolve_workload(path)


MEANWHILE_SWITCH_S = 0.0005  # the GIL's switch interval while `meanwhile` runs beside the chains' threads


def _beside_threads(fn: Callable[[], None]) -> None:
    """fn() in this thread while the chains' threads run, the GIL handed over every MEANWHILE_SWITCH_S: at Python's default
    (5 ms) an import holding it keeps a chain that a finished replication woke from submitting its next one that long
    (measured on the default plan, side by side: 2.53 against 2.71 s with the import before the threads start)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(MEANWHILE_SWITCH_S)
    try:
        fn()
    finally:
        sys.setswitchinterval(old)


def _threaded_chains(settings: PlanSettings, chains: list[Chain], progress, reps: PooledReplications,
                     meanwhile: Callable[[], None] | None = None) -> list[CellSearch]:
    """run_chains on a PooledReplications: one thread per chain here (they wait on the workers), cells in the chains' order."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    slo = parse_slo(settings.slo)
    point = reps.point(slo)
    t0 = time.perf_counter()
    ordered = sorted(chains, key=lambda c: (c.mode.sim_cost_rank, -max(c.qps)))  # the order run_chains's jobs take
    if meanwhile is not None:
        reps.first_replications(ordered)  # the workers start on them while the threads start and `meanwhile` runs here
    threads = ThreadPoolExecutor(max_workers=len(ordered), thread_name_prefix="plan-chain")
    try:
        futs = {threads.submit(search_chain, point, c.hardware, c.mode.name, c.qps, slo, settings.max_replicas, c.start): i
                for i, c in enumerate(ordered)}
        if meanwhile is not None:
            _beside_threads(meanwhile)
        results: list = [None] * len(ordered)
        for f in as_completed(futs):
            results[futs[f]] = chain = f.result()
            if progress and chain:
                c = chain[0]
                got = ", ".join(f"{x.qps:g}->{x.replicas if x.replicas is not None else '-'}" for x in chain)
                progress(f"{c.hardware}/{c.mode}: replicas per QPS {got} ({sum(len(x.probes) for x in chain)} points, "
                         f"{sum(int(p.get('replications', 1)) for x in chain for p in x.points)} simulations, {time.perf_counter() - t0:.1f} s)")
    except BaseException:
        reps.pool.close(cancel=True)  # the chains' threads wake (their replications fail) and end
        threads.shutdown(wait=False, cancel_futures=True)
        raise
    threads.shutdown(wait=True)
    return [cell for chain in results for cell in chain]


def refine_point(lo_q: float, hi_q: float) -> float:
    """The QPS to evaluate next inside a crossover bracket: the midpoint, to 3 significant digits."""
    return float(f"{(lo_q + hi_q) / 2:.3g}")


def bracket_starts(cells: list[CellSearch], lo_q: float, hi_q: float, max_replicas: int) -> tuple[dict, dict]:
    """Per (hardware, mode): ChainStart bounds for a QPS between lo_q and hi_q (answer at lo_q <= r <= answer at hi_q),
    and notes for cells that need no search because lo_q already needed more than max_replicas."""
    at = {(c.hardware, c.mode, c.qps): c for c in cells}
    starts, skip = {}, {}
    for (h, m, q), c in at.items():
        if q != lo_q:
            continue
        if c.replicas is None:
            skip[(h, m)] = none_fits(max_replicas, lo_q)
            continue
        hi = at.get((h, m, hi_q))
        starts[(h, m)] = ChainStart(lower=c.replicas, upper=hi.replicas if hi is not None and hi.replicas is not None else None, prev_qps=lo_q)
    return starts, skip


def below_starts(cells: list[CellSearch], hi_q: float) -> dict:
    """Per (hardware, mode): ChainStart bounds for a QPS below hi_q, the lowest searched (its answer is an upper bound)."""
    return {(c.hardware, c.mode): ChainStart(lower=1, upper=c.replicas) for c in cells if c.qps == hi_q and c.replicas is not None}


def default_jobs() -> int:
    return cores()


def points_frame(cells: list[CellSearch]) -> "pd.DataFrame":
    """The cells' point rows as one frame."""
    import pandas as pd  # the table library, where the table is made (a plan's workers fork before it loads: run_plan)

    rows = [r for c in cells for r in c.points]
    if not rows:
        raise UserError("the plan evaluated no points", "check --qps, --hardware and --mode")
    return pd.DataFrame(rows)


def cell_notes(cells: list[CellSearch]) -> dict:
    return {(c.hardware, c.mode, float(c.qps)): c.note for c in cells if c.note}


def probes_record(cells: list[CellSearch]) -> list[dict]:
    return [{"hardware": c.hardware, "mode": c.mode, "qps": c.qps, "replicas": c.replicas, "replicas_low": c.replicas_low,
             "probes": [{"replicas": r, "meets_slo": ok, "verdict": c.verdicts.get(r, "pass" if ok else "fail")} for r, ok in c.probes],
             "note": c.note} for c in cells]
