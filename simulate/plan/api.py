"""The plan stage's API (what `costmodel plan` calls): check a PlanConfig, run the replica searches
on the simulator, price them, refine the crossover, and write the plan artefact.

    outcome = run_plan(PlanConfig(qps=[5, 20, 50], slo="p95_ttft_ms<=1000", hardware=["h200"], modes=["diffusion", "ar"]))
    outcome.analysis.cheapest, outcome.analysis.crossover.text
    write_plan(outcome, "out/plan")  # plan.csv, answer.csv (+ data dictionaries) and plan.json
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from costmodel import outputset
from costmodel.costing import PricingConfig, gpu_price
from costmodel.errors import UserError
from costmodel.modes import get_mode
from costmodel.options import QPS_MIN, check_rate
from costmodel.jsonfile import records
from costmodel.schemas.plan import ANSWER_DOCS, write_plan_json
from costmodel.schemas.profile import Profile, heldout_error
from costmodel.schemas.provenance import profile_provenance
from costmodel.shipped import resolve_profile, shipped_hardware
from costmodel.slo import Slo, parse_slo
from simulate.plan import planner
from simulate.api import resolve_engine, resolve_workload
from simulate.batch import check_requests_fit
from simulate.parallel import Beside, ProcessPool, Workers
from simulate.plan.settle import DEFAULT_MAX_REPLICATIONS, MIN_REPLICATIONS

if TYPE_CHECKING:
    from costmodel.costing import Analysis, Crossover

DEFAULT_DURATION_S = None  # one replication's window follows from the load (simulate/plan/settle.py window_s)
DEFAULT_SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=5000"
DEFAULT_HARDWARE = shipped_hardware()  # every GPU a profile ships for
DEFAULT_QPS = (5.0, 20.0, 50.0)
DEFAULT_MAX_REPLICAS = 64
DEFAULT_CROSSOVER_STEPS = 8  # bisection steps at most (each simulates one QPS for every GPU and mode); they stop at the tolerance


@dataclass
class PlanConfig:
    """What to plan: every (GPU, mode, QPS) cell gets the fewest replicas meeting `slo`."""

    qps: list[float] = field(default_factory=lambda: list(DEFAULT_QPS))
    slo: str = DEFAULT_SLO
    hardware: list[str] = field(default_factory=lambda: list(DEFAULT_HARDWARE))
    modes: list[str] | None = None  # None: the modes every planned GPU's profile carries (Profile.mode_names)
    profiles: list[str] = field(default_factory=list)  # profile JSONs replacing the shipped default of their GPU
    pricing: PricingConfig = field(default_factory=PricingConfig)
    workload: str | None = None
    duration_s: float | None = DEFAULT_DURATION_S  # one replication's arrival window (None: from the load)
    seed: int = 0
    max_replications: int = DEFAULT_MAX_REPLICATIONS  # replications a point may take before it is called borderline
    max_replicas: int = DEFAULT_MAX_REPLICAS
    refine_crossover: int = DEFAULT_CROSSOVER_STEPS  # bisection steps of the crossover at most (0: the QPS grid only)
    jobs: int | None = None  # None: one local worker process per available core (1: serially, no Dask)
    scheduler: str | None = None  # a Dask scheduler address (tcp://HOST:8786); None: DASK_SCHEDULER_ADDRESS, else a local cluster
    prefix_caching: bool | None = None  # vLLM's prefix caching for every point (None: its default, on)


@dataclass
class PlanOutcome:
    settings: planner.PlanSettings
    slo: Slo
    pricing: PricingConfig
    profiles: dict[str, Profile]  # hardware -> profile
    cells: list[planner.CellSearch]
    analysis: Analysis
    wall_s: float
    extras: dict = field(default_factory=dict)  # name -> (table for NAME.csv, record for plan.json): replicates, sensitivity


@dataclass
class _Resolved:
    slo: Slo
    hardware: list[str]
    profiles: dict[str, Profile]
    profile_paths: dict[str, str | None]
    workload: str | None


def _resolve(cfg: PlanConfig) -> _Resolved:
    """Every input checked before any simulation runs (one-line errors)."""
    if cfg.duration_s is not None and not cfg.duration_s > 0:
        raise UserError(f"--duration {cfg.duration_s} is not positive", "give simulated seconds per replication, e.g. 60, or leave it out (from the load)")
    if isinstance(cfg.max_replications, bool) or not isinstance(cfg.max_replications, int) or cfg.max_replications < MIN_REPLICATIONS:
        raise UserError(f"--max-replications {cfg.max_replications} is below {MIN_REPLICATIONS}",
                        f"give an integer >= {MIN_REPLICATIONS} (a pass needs a t-interval over at least {MIN_REPLICATIONS} replications)")
    if cfg.max_replicas < 1:
        raise UserError(f"--max-replicas {cfg.max_replicas} is below 1", "give an integer >= 1")
    if cfg.jobs is not None and cfg.jobs < 1:
        raise UserError(f"--jobs {cfg.jobs} is below 1", "give an integer >= 1")
    if cfg.refine_crossover < 0:
        raise UserError(f"--refine-crossover {cfg.refine_crossover} is negative", "give the most bisection steps of the crossover, e.g. 8 (0: the grid only)")
    for q in cfg.qps:
        check_rate(q)  # a floor and a ceiling: finite arrival gaps, a bounded run
    slo = parse_slo(cfg.slo)
    Workers(cfg.scheduler).check()  # --scheduler and DASK_SCHEDULER_ADDRESS (scheme, host, port), before any search
    hw_list = list(dict.fromkeys(cfg.hardware))
    paths: dict[str, str | None] = {}
    loaded: dict[str, Profile] = {}
    for p in cfg.profiles:
        prof = resolve_profile(p, "")
        hid = prof.hardware.id
        if hid in paths:
            raise UserError(f"two --profile files are for {hid}", "pass one profile per GPU")
        paths[hid], loaded[hid] = str(Path(p).resolve()), prof
        if hid not in hw_list:
            hw_list.append(hid)
    for h in hw_list:
        if h not in loaded:
            loaded[h], paths[h] = resolve_profile(None, h), None
    modes = carried_modes([loaded[h] for h in hw_list]) if cfg.modes is None else cfg.modes
    for h in hw_list:
        for m in modes:
            loaded[h].mode(m)  # a profile lacking a requested mode fails here, before any simulation
    servings = [get_mode(m) for m in modes]  # the modes' registry entries, resolved once (the profiles carry them)
    specs = {h: loaded[h].hardware_spec() for h in hw_list}
    cfg.pricing.check_hardware(specs)
    if cfg.pricing.onprem:
        for s in specs.values():
            gpu_price(s, cfg.pricing)  # a GPU with no purchase price fails now, not after the simulations
    workload = None
    if cfg.workload:
        wl = resolve_workload(cfg.workload)  # a malformed workload fails here, before any simulation
        if wl.recorded_rate:
            raise UserError(f"workload {cfg.workload} replays its trace at the recorded rate", 'plan sets the rate per QPS: use "trace_time_scale": "qps"')
        workload = str(Path(cfg.workload).resolve())
    for h in hw_list:  # no request above what a replica serves (the model's context, max_model_len, KV)
        check_requests_fit(loaded[h], servings, resolve_workload(workload) if workload else None, resolve_engine(loaded[h], None))
    cfg.modes = modes
    return _Resolved(slo, hw_list, loaded, paths, workload)


def carried_modes(profiles: list[Profile]) -> list[str]:
    """The modes every profile carries, in display order: plan's modes when no --mode is given (a
    GPU's cell for a mode its profile lacks could not be simulated)."""
    modes = [m for m in profiles[0].mode_names() if all(m in p.modes for p in profiles[1:])]
    if not modes:
        raise UserError(f"the profiles of {', '.join(p.hardware.id for p in profiles)} carry no mode in common",
                        "give --mode and --hardware for the GPUs whose profiles carry it")
    return modes


def run_plan(cfg: PlanConfig, progress: Callable[[str], None] | None = None, meanwhile: Callable[[], None] | None = None) -> PlanOutcome:
    """Search, price, and search the crossover along QPS: each round bisects, for every crossover
    (over all GPUs, and each GPU's where there are several), the widest of its brackets (its
    estimate's and its interval's two ends) still to narrow (Crossover.gaps_to_refine: wider than 5% of its
    upper end and a quarter of the 95% interval), at most cfg.refine_crossover steps each; a round simulates only the chains its
    crossover compares (one GPU's, or all) and every round's chains run together on one pool of
    forked workers: the crossover does not depend on the grid. The analysis's libraries (pandas, the costing) load
    while the workers run the first simulations (analysis_libraries, then `meanwhile()`: what the caller loads for later,
    such as its tables' library), not before the workers fork."""
    t0 = time.perf_counter()
    r = _resolve(cfg)
    qps_values = sorted(set(cfg.qps))
    settings = planner.PlanSettings(list(qps_values), r.slo.text, r.hardware, [get_mode(m) for m in cfg.modes], r.profile_paths, cfg.duration_s,
                                    cfg.seed, cfg.max_replicas, cfg.jobs or planner.default_jobs(), r.workload, cfg.refine_crossover,
                                    engine=None if cfg.prefix_caching is None else {"enable_prefix_caching": cfg.prefix_caching},
                                    max_replications=cfg.max_replications)
    say = progress or (lambda s: None)
    window = f"{cfg.duration_s:g} simulated s" if cfg.duration_s else "a window from the load"
    say(f"plan: {len(r.hardware)} GPUs x {len(cfg.modes)} modes x {len(qps_values)} QPS, {window} per replication, "
        f"{MIN_REPLICATIONS}-{cfg.max_replications} replications per point until its verdict settles, {settings.jobs} processes")
    specs = {h: p.hardware_spec() for h, p in r.profiles.items()}
    with _replications_pool(settings, cfg.scheduler) as pool:
        def load_meanwhile() -> None:
            analysis_libraries()
            if meanwhile is not None:
                meanwhile()

        cells = planner.run_searches(settings, progress=progress, scheduler=cfg.scheduler, pool=pool, meanwhile=load_meanwhile)
        from costmodel.costing import analyse, crossovers

        def crossings() -> tuple[Crossover, dict[str, Crossover]]:  # what a round reads: the crossovers alone, on the rows as records
            return crossovers([p for c in cells for p in c.points], r.slo, cfg.pricing, specs, sorted({c.qps for c in cells}), planner.cell_notes(cells))

        found = crossings()
        used: dict[str, int] = {}  # bisection steps per crossover (over all GPUs, and each GPU's where there are several)
        while probes := _next_probes(found, cells, used, cfg, r.hardware):
            chains = []
            for scope, q, lo, hi in probes:
                used[scope] = used.get(scope, 0) + 1
                say(f"crossover search ({scope}): simulating {q:g} QPS " + (f"inside the bracket {lo:g}-{hi:g}" if lo is not None else f"below {hi:g}"))
                chains += _probe_chains(cells, settings, scope, q, cfg.max_replicas, {(c.hardware, c.mode.name) for c in chains if q in c.qps},
                                        pin=not cfg.pricing.onprem)
            cells += planner.run_chains(settings, chains, progress=progress, scheduler=cfg.scheduler, pool=pool)
            found = crossings()
        a = analyse(planner.points_frame(cells), r.slo, cfg.pricing, specs, sorted({c.qps for c in cells}), planner.cell_notes(cells), loads=cfg.qps)
    settings.qps = sorted({c.qps for c in cells})
    settings.crossover_search_qps = sorted(set(settings.qps) - set(cfg.qps))
    return PlanOutcome(settings, r.slo, cfg.pricing, {h: r.profiles[h] for h in r.hardware}, cells, a, time.perf_counter() - t0)


def analysis_libraries() -> None:
    """Import what pricing the points and writing the plan's files need (pandas and the costing, its tables' dictionaries):
    run_plan calls this while the workers simulate the first replications, which were forked without them."""
    import costmodel.costing.answer  # noqa: F401 - (and with it the analysis, the crossover and pandas)
    import costmodel.costing.cheapest  # noqa: F401
    import costmodel.schemas.dictionary  # noqa: F401


def _replications_pool(settings: planner.PlanSettings, scheduler: str | None):
    """Where the plan's simulations run: on this machine's cores, one replication at a time on forked
    workers (planner.PooledReplications); with a Dask scheduler, or one job, one chain per job (ProcessPool)."""
    if settings.jobs > 1 and Workers(scheduler).resolved_address() is None:
        return planner.PooledReplications(settings, settings.jobs)
    return ProcessPool(settings.jobs)


def _probe_chains(cells, settings, scope: str, q: float, max_replicas: int, taken: set, pin: bool = True) -> list:
    """The chains one crossover probe simulates at `q`: the scope's GPU's (or every GPU's), each not
    already evaluated at `q`, its search bounded by its own answers at the nearest QPS below and
    above (more load never needs fewer replicas); a chain with no fleet below needs no search, and
    one whose settled count is the same below and above (none borderline) is pinned there, not
    simulated, where `pin` (a price that does not depend on the GPUs' utilisation); with `pin`, the
    count settled above passes here too and is pinned (only the counts below it are simulated)."""
    by_chain: dict = {}
    for c in cells:
        by_chain.setdefault((c.hardware, c.mode), []).append(c)
    out = []
    for h in settings.hardware:
        if scope != "all hardware" and h != scope:
            continue
        for m in settings.modes:
            key = (h, m.name)
            seen = by_chain.get(key, [])
            if any(c.qps == q for c in seen) or key in taken:
                continue
            below = max((c for c in seen if c.qps < q and not c.note), key=lambda c: c.qps, default=None)
            above = min((c for c in seen if c.qps > q and not c.note), key=lambda c: c.qps, default=None)
            if below is not None and below.replicas_low is None:
                cells.append(planner.CellSearch(h, m.name, q, None, note=planner.none_fits(max_replicas, below.qps)))
                continue
            if pin and below is not None and above is not None and below.replicas is not None and \
                    below.replicas == above.replicas == below.replicas_low == above.replicas_low:
                cells.append(planner.pinned_cell(h, m.name, q, below, above, settings.slo))  # no count between can differ: not simulated
                continue
            start = planner.ChainStart(lower=below.replicas_low if below is not None else 1,
                                       upper=above.replicas if above is not None and above.replicas is not None else None,
                                       prev_qps=below.qps if below is not None else None,
                                       upper_qps=above.qps if pin and above is not None and above.replicas is not None else None)
            out.append(planner.Chain(h, m, (q,), start))
    return out


def _next_probes(found: tuple[Crossover, dict[str, Crossover]], cells, used: dict[str, int], cfg: PlanConfig,
                 hardware: list[str]) -> list[tuple[str, float, float | None, float]]:
    """One QPS per crossover still to narrow: the midpoint of its widest bracket still to narrow
    (Crossover.gaps_to_refine), or half the lowest QPS where DiffusionGemma
    already costs more (down to an eighth of the lowest QPS asked); each crossover at most
    cfg.refine_crossover steps. [(scope, qps, bracket low or None below the range, bracket high)]."""
    overall, by_hardware = found  # (cheapest.crossovers)
    scoped = [overall] + (list(by_hardware.values()) if len(by_hardware) > 1 else [])
    floor = max(min(cfg.qps) / 8, QPS_MIN)
    done = {}
    for c in cells:
        done.setdefault(c.qps, set()).add(c.hardware)
    out = []
    for c in scoped:
        if used.get(c.scope, 0) >= cfg.refine_crossover:
            continue
        need = set(hardware) if c.scope == "all hardware" else {c.scope}
        if c.status == "bracketed":
            for lo, hi in c.gaps_to_refine():
                if lo == 0.0:  # the interval's low end lies below the lowest QPS: halve it (down to the floor)
                    q = float(f"{hi / 2:.3g}")
                    if q >= floor and not need <= done.get(q, set()):
                        out.append((c.scope, q, None, hi))
                        break
                    continue
                inside = sorted((x for x in done if lo < x < hi), key=lambda x: abs(x - (lo + hi) / 2))
                q = inside[0] if inside else planner.refine_point(lo, hi)  # a QPS another crossover probed: its cells are reused
                if q > lo and q < hi and not need <= done.get(q, set()):
                    out.append((c.scope, q, lo, hi))
                    break
        elif c.status == "below-range" and c.qps_high / 2 >= floor:
            q = float(f"{c.qps_high / 2:.3g}")
            if not need <= done.get(q, set()):
                out.append((c.scope, q, None, c.qps_high))
    return out


def plan_provenance(profiles: dict[str, Profile], modes) -> dict[str, dict]:
    """Each GPU's profile provenance (costmodel/schemas/provenance.py) with the engine model's held-out
    error where the profile records it (costmodel/schemas/profile.py heldout_error): what the answer rests on."""
    out = {}
    for h, p in profiles.items():
        prov = profile_provenance(p, modes=set(getattr(m, "name", m) for m in modes))
        held = heldout_error(p)
        out[h] = {**prov, "heldout_error": held} if held else prov
    return out


def write_plan(outcome: PlanOutcome, out_dir: str | Path, meanwhile: Callable[[], None] | None = None) -> list[Path]:
    """plan.csv and answer.csv with their data dictionaries, and plan.json (the plan artefact, costmodel/schemas/plan.py);
    `meanwhile()` (printing the tables) runs while a forked child writes them (simulate/parallel.py Beside)."""
    with outputset.publishing(out_dir, "plan") as stage:  # one output set, published whole (costmodel/outputset.py)
        job = Beside(_write_plan_files, outcome, stage)
        if meanwhile is not None:
            meanwhile()
        written = job.result()
    return outputset.published(written, stage, out_dir) + [Path(out_dir) / outputset.MANIFEST]


def _write_plan_files(outcome: PlanOutcome, out: Path) -> list[Path]:
    from costmodel.costing import answer_frame, answer_lines
    from costmodel.schemas.dictionary import write_table

    a, cells, modes = outcome.analysis, outcome.cells, set(outcome.settings.mode_names)
    provenance = plan_provenance(outcome.profiles, modes)
    written = write_table(a.cells, out / "plan.csv")
    written += write_table(answer_frame(a, provenance), out / "answer.csv", ANSWER_DOCS)  # the answer's words and numbers
    for name, (table, _) in outcome.extras.items():  # plan --seeds / --sensitivity (simulate/plan/sensitivity.py)
        written += write_table(table, out / f"{name}.csv")
    doc = {
        "settings": outcome.settings.to_dict(), "slo": outcome.slo.text, "pricing": outcome.pricing.to_dict(),
        "hardware_specs": {h: p.hardware_spec().to_dict() for h, p in outcome.profiles.items()},
        "profiles": provenance,
        "searches": planner.probes_record(cells),
        "points": records(planner.points_frame(cells)),
        "cell_notes": [{"hardware": h, "mode": m, "qps": q, "note": n} for (h, m, q), n in planner.cell_notes(cells).items()],
        "results": {"answer": answer_lines(a, provenance), "cells": records(a.cells), "cheapest": records(a.cheapest), "crossover": a.crossover.to_dict(),
                    "crossover_by_hardware": {h: c.to_dict() for h, c in a.crossover_by_hardware.items()},
                    "prices": {h: p.__dict__ for h, p in a.prices.items()}},
        **{name: record for name, (_, record) in outcome.extras.items()},
        "simulations": sum(int(p.get("replications", 1)) for c in cells for p in c.points),
        "points_evaluated": sum(len(c.points) for c in cells),
        "wall_s": outcome.wall_s,
    }
    written.append(write_plan_json(out / "plan.json", doc))
    return written
