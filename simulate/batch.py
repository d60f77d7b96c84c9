"""A batch of simulated points as `costmodel simulate` runs it: one profile, several modes x QPS,
every input checked before the first point runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from costmodel.errors import UserError
from costmodel.hardware import default_hardware
from costmodel.modes import ServingMode
from costmodel.memory import replica_memory, request_limit
from costmodel.options import check_burstiness, check_concurrency, check_rate
from costmodel.schemas.profile import Profile
from costmodel.shipped import resolve_profile
from simulate.engine import EngineConfig, mode_settings
from simulate.point import DEFAULT_WARMUP_FRAC, PointResult, check_mode, resolve_engine
from simulate.parallel import simulate_grid
from simulate.routers import DEFAULT_ROUTER
from simulate.workload import Workload, check_fits, check_run_size, expected_requests, load_workload, unlimited_closed_loop, with_burstiness

DEFAULT_HARDWARE = default_hardware()  # the catalog's default GPU


@dataclass
class SimulateConfig:
    qps: list[float] | None  # None: replay the workload's trace at its recorded rate
    modes: list[str] | None = None  # None: the modes the profile carries (Profile.mode_names)
    hardware: str | None = None  # the shipped profile's GPU (default: the catalog's), or the --profile's
    profile_path: str | None = None
    replicas: int = 1
    duration_s: float | None = None
    n_requests: int | None = None
    workload_path: str | None = None
    seed: int = 0
    engine: dict = field(default_factory=dict)  # max_num_seqs, max_num_batched_tokens, gpu_memory_utilization overrides
    router: str = DEFAULT_ROUTER
    warmup_frac: float = DEFAULT_WARMUP_FRAC
    jobs: int | None = None
    # closed-loop client counts (vllm bench serve --max-concurrency), crossed with qps; None: open loop.
    # With qps None, no rate limit: each finish sends the next request
    concurrency: list[int] | None = None
    burstiness: float | None = None  # vllm bench serve --burstiness: gamma arrival gaps of this shape (1: Poisson)


@dataclass
class SimulateOutcome:
    profile: Profile
    results: list[PointResult]


def _check(cfg: SimulateConfig) -> None:
    if cfg.seed < 0:
        raise UserError(f"--seed {cfg.seed} is negative", "give an integer >= 0")
    if cfg.replicas < 1:
        raise UserError(f"--replicas {cfg.replicas} is below 1", "give an integer >= 1")
    if cfg.jobs is not None and cfg.jobs < 1:
        raise UserError(f"--jobs {cfg.jobs} is below 1", "give an integer >= 1")
    if cfg.duration_s is not None and not (math.isfinite(cfg.duration_s) and cfg.duration_s > 0):
        raise UserError(f"--duration {cfg.duration_s:g} must be a positive number of seconds", "e.g. --duration 600")
    if cfg.n_requests is not None and cfg.n_requests < 1:
        raise UserError(f"--requests {cfg.n_requests} is below 1", "give an integer >= 1")
    if not 0 <= cfg.warmup_frac < 1:
        raise UserError(f"--warmup {cfg.warmup_frac:g} must be in [0, 1)", "e.g. --warmup 0.1")
    for q in cfg.qps or []:
        check_rate(q)  # a floor and a ceiling: finite arrival gaps, a bounded run
    if cfg.qps is not None and len(set(cfg.qps)) != len(cfg.qps):
        raise UserError(f"--qps lists a rate twice ({','.join(f'{q:g}' for q in cfg.qps)})", "give each rate once")
    for c in cfg.concurrency or []:
        check_concurrency(c)
    if cfg.concurrency is not None and len(set(cfg.concurrency)) != len(cfg.concurrency):
        raise UserError(f"--concurrency lists a number twice ({','.join(map(str, cfg.concurrency))})", "give each once")
    if cfg.burstiness is not None:
        check_burstiness(cfg.burstiness)
        if cfg.qps is None:
            raise UserError("--burstiness shapes the gaps between arrivals at a rate, and no --qps is given", "give --qps, or drop --burstiness")


def _check_size(cfg: SimulateConfig, workload: Workload | None, qps_list: list) -> None:
    """Every point within the memory budget (simulate/workload.py), before any point runs."""
    for q in qps_list:
        for c in cfg.concurrency or [None]:
            what = (f"--qps {q:g}" if q is not None else f"--concurrency {c}" if c else "the trace at its recorded rate")
            check_run_size(expected_requests(workload, q, cfg.n_requests, cfg.duration_s, c), cfg.replicas, what)


def _profile(cfg: SimulateConfig) -> tuple[Profile, list[ServingMode]]:
    """The profile and the modes it runs (`cfg.modes`, default the modes the profile carries)."""
    profile = resolve_profile(cfg.profile_path, cfg.hardware or DEFAULT_HARDWARE)
    if cfg.profile_path and cfg.hardware and profile.hardware.id != cfg.hardware:
        raise UserError(f"--profile {cfg.profile_path} is for {profile.hardware.id}, not --hardware {cfg.hardware}",
                        "drop --hardware (the profile fixes the GPU) or pass a profile for that GPU")
    if cfg.modes is None:
        cfg.modes = profile.mode_names()
    return profile, [check_mode(profile, m) for m in cfg.modes]


def check_requests_fit(profile: Profile, modes: list[ServingMode], workload: Workload | None, engine: EngineConfig) -> None:
    """Every request of the workload within what one replica of each mode serves (the model's
    context, max_model_len, one request's KV blocks: costmodel.memory.request_limit), before any
    point runs: vLLM would refuse a longer request, not queue it."""
    r = profile.resolved()
    for mode in modes:
        s, _ = mode_settings(profile, mode, engine)
        m = profile.mode(mode.name)
        mem = replica_memory(r.spec, mode, r.precision, s.memory_settings(), model=m.model, assistant=m.assistant)
        lim = request_limit(mem, s.kv_capacity_tokens)
        check_fits(profile, workload, lim.tokens, lim.why, mode.name)


def run_simulation(cfg: SimulateConfig, progress: Callable | None = None) -> SimulateOutcome:
    """Every (mode, QPS) point of `cfg`; `progress(done, total, result)` as points finish."""
    _check(cfg)
    workload: Workload | None = load_workload(cfg.workload_path) if cfg.workload_path else None
    if cfg.burstiness is not None:
        workload = with_burstiness(workload, cfg.burstiness)
    qps_list = cfg.qps
    if qps_list is None:
        if not (workload is not None and workload.recorded_rate) and not cfg.concurrency:
            raise UserError("--qps is missing", "give arrival rates, e.g. --qps 1,2,4,8, or closed-loop clients, e.g. --concurrency 16")
        qps_list = [None]
    if cfg.concurrency and cfg.qps is None:  # a closed loop with no rate: its inputs checked before any point runs
        unlimited_closed_loop(workload or Workload(), None, cfg.concurrency[0], cfg.duration_s)
    _check_size(cfg, workload, qps_list)
    profile, modes = _profile(cfg)
    engine = resolve_engine(profile, cfg.engine)
    check_requests_fit(profile, modes, workload, engine)
    results = simulate_grid(profile, cfg.modes, qps_list, processes=cfg.jobs, progress=progress, replicas=cfg.replicas, workload=workload,
                    duration_s=cfg.duration_s, n_requests=cfg.n_requests, seed=cfg.seed, engine=engine, router=cfg.router,
                    warmup_frac=cfg.warmup_frac, concurrency=cfg.concurrency)
    return SimulateOutcome(profile, results)


def write_outcome(outcome: SimulateOutcome, out_dir: str | Path) -> list[Path]:
    """The simulation-results artefact (costmodel/schemas/results.py)."""
    from costmodel.schemas.results import write_simulation  # its writers (outputset, atomic) load only with -o

    return write_simulation(out_dir, [(r.summary, r.requests) for r in outcome.results], outcome.profile)
