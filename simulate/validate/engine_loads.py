"""A profile fitted on a real engine's recorded steps, checked on loads that took no part in the fit
(issue 37): per load, predicted vs measured output tok/s, TTFT p50 and p95, TPOT p50.

A campaign folder (measure/vllm/gpu_run.py: data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) holds
the engine's steps and the loads it served. `fit_campaign` fits one profile on every mode's steps
less the check loads' (the calibration design says which, measure/vllm/gpu_design.py: other
concurrencies, Poisson rates and prompt lengths than the fitted ones) and the warm-up's; `check_loads`
simulates each check load in its own terms (its requests' lengths, closed-loop clients or its
recorded send times, the engine settings it ran with) and sets the figures side by side.

    prof, notes = fit_campaign(Path("data/runs/engine"), "h200", "fp8")
    rows = check_loads(prof, Path("data/runs/engine"), "h200", "fp8")
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from costmodel.engine_settings import from_run_engine
from costmodel.modes import get_mode
from costmodel.errors import UserError
from costmodel.schemas.profile import FRONTEND_LATENCY_KEY, Profile
from costmodel.schemas.rundir import load_run
from measure.fit.assemble import FitOptions
from measure.fit.stalls import first_use_stalls
from measure.fit.steps import build_step_profile
from measure.vllm.gpu_design import EngineSetup, setup_of
from measure.vllm.gpu_loads import RecordedLoad, loads_json, read_load_windows, recorded_loads
from simulate.calibrate import frontend_latency_fit
from simulate.compare import LoadComparison, compare_loads, from_recorded

COLD_SHARE = 0.02  # a load that spent more of its time in first-use stalls is not scored as a steady state
POISSON_STALL_SHARE = 0.10
TARGETS = {"tok_s": 10.0, "tpot_p50_ms": 10.0, "ttft_p50_ms": 15.0}  # % (issue 37): TTFT p50 below saturation


@dataclass(frozen=True)
class LoadCheck:
    mode: str
    setup: str
    load: RecordedLoad
    comparison: LoadComparison
    in_fit: bool
    engine_running: float = math.nan  # mean running requests over the load's engine steps
    client_in_flight: float = math.nan  # mean requests the clients had sent and not yet seen finish
    stalls: int = 0  # first-use stalls among its steps (measure/fit/stalls.py): a one-time compilation, not a steady state
    stall_s: float = 0.0  # their summed time above their like
    duration_s: float = math.nan  # the load's window

    @property
    def status(self) -> str:
        """What the load can be scored as: "refused" (the engine failed its requests), "cold" (more than
        COLD_SHARE of its time went to first-use compilations, which the simulator does not model: a
        server pays each once) or "steady"."""
        return "refused" if self.load.refused else "cold" if self.stall_s > COLD_SHARE * self.duration_s else "steady"

    def error_pct(self, metric: str) -> float:
        e = self.comparison.error(metric)
        return 100 * e if math.isfinite(e) else math.nan


def setup_dirs(root: Path, gpu: str, precision: str) -> list[tuple[str, Path]]:
    """(mode, setup directory) of every recorded setup of one GPU and precision."""
    out = []
    for d in sorted(Path(root).glob(f"{gpu}-{precision}-*")):
        for s in sorted(p for p in d.iterdir() if (p / "manifest.json").exists()):
            out.append((load_run(s).manifest.mode, s))
    if not out:
        raise UserError(f"no recorded engine setups for {gpu} {precision} under {root}", "record them with scripts/gpu_engine.sh")
    return out


def design_setup(sdir: Path) -> EngineSetup:
    """The calibration design's setup a recorded setup directory ran (its roles: fit, check, warm-up),
    as a run cut short is scored (EngineSetup.as_recorded)."""
    run = load_run(sdir)
    try:
        setup = setup_of(get_mode(run.manifest.mode), str(run.manifest.engine.get("setup") or sdir.name))
    except KeyError:
        raise UserError(f"{sdir}: engine setup {sdir.name!r} is not in the calibration design (measure/vllm/gpu_design.py)",
                        "record it with scripts/gpu_engine.sh, or add the setup to the design") from None
    return setup.as_recorded({ld["name"] for ld in loads_json(sdir) if not ld.get("skipped")})


def fit_campaign(root: Path, gpu: str, precision: str, seed: int = 0) -> tuple[Profile, list[str]]:
    """One profile of every recorded mode, fitted without the check and warm-up loads' steps; then each
    mode's front-end latency (simulate/calibrate.py) on its lowest-rate fitted Poisson load."""
    runs = setup_dirs(root, gpu, precision)
    pats = {str(s.resolve()): design_setup(s).holdout for _, s in runs}
    res = build_step_profile([s for _, s in runs], FitOptions(holdout_loads=pats, seed=seed))
    prof, msgs = res.profile, list(res.messages)
    msgs += with_frontend_latency(prof, [s for _, s in runs])
    return prof, msgs


def with_frontend_latency(prof: Profile, setup_dirs: list[Path], as_run: Profile | None = None) -> list[str]:
    """Each mode's front-end latency (simulate/calibrate.py) fitted on one load the fit used
    (`frontend_load`, over all the mode's setups), written into `prof`'s engine section; the lines that
    say so. `as_run`: the same engine with the behaviour the runs had (dummy weights: every canvas to its
    step budget), when `prof` carries another (the published prior); the loads are simulated on it.
    Setup directories without recorded loads are passed over."""
    as_run = prof if as_run is None else as_run
    by_mode: dict[str, list[Path]] = {}
    for sdir in map(Path, setup_dirs):
        if (sdir / "loads.json").exists():
            by_mode.setdefault(load_run(sdir).manifest.mode, []).append(sdir)
    fronts, msgs = {}, []
    for mode, dirs in by_mode.items():
        if mode not in prof.modes:
            continue
        pick = frontend_load(dirs)
        if pick is None:
            continue
        sdir, low = pick
        settings = from_run_engine(load_run(sdir).manifest.engine, mode, f"run {sdir}")
        fronts[mode] = frontend_latency_fit(as_run, mode, [from_recorded(low)], settings)
        msgs.append(f"{mode}: front-end latency {fronts[mode]['ms']:.1f} ms per request (TTFT p50 of {low.name} in {sdir.name}, "
                    "measured less simulated)")
    if fronts:
        prof.engine[FRONTEND_LATENCY_KEY] = fronts
        prof.__dict__.pop("_resolved", None)
    return msgs


def frontend_load(setup_dirs: list[Path]) -> tuple[Path, RecordedLoad] | None:
    """The (setup, load) a mode's front-end latency is fitted on, among the fitted loads the engine
    served: the lowest-rate Poisson one (the least queueing; its TTFT p50 over tens of requests shrugs
    off a few that met a first-use stall, up to POISSON_STALL_SHARE of its time), else the steady closed
    loop with the fewest clients (a handful of requests, where one stall moves the p50), else the closed
    loop with the fewest. (Leaving the stalled requests out instead biases the p50: at low load the
    requests that meet a stall are those whose own new prompt length compiled.)"""
    poisson, closed = [], []
    for sdir in setup_dirs:
        setup = design_setup(sdir)
        share = {n: s / d if d > 0 else math.inf for n, (_, s, d) in load_stalls(sdir).items()}
        for ld in recorded_loads(sdir):
            if setup.role(ld.name) == "fit" and not ld.refused:
                (poisson if ld.kind == "poisson" else closed).append((sdir, ld, share.get(ld.name, 0.0)))
    poisson = [c for c in poisson if c[2] <= POISSON_STALL_SHARE]
    if poisson:
        return min(poisson, key=lambda c: c[1].rate_rps)[:2]
    closed.sort(key=lambda c: c[1].concurrency or 0)
    pick = [c for c in closed if c[2] <= COLD_SHARE] or closed
    return pick[0][:2] if pick else None


def check_loads(profile: Profile, root: Path, gpu: str, precision: str, include_fit: bool = False, seed: int = 0) -> list[LoadCheck]:
    """Every check load (and, with include_fit, the fitted ones too) simulated in its own terms."""
    out = []
    for mode, sdir in setup_dirs(root, gpu, precision):
        if mode not in profile.modes:
            continue
        run = load_run(sdir)
        settings = from_run_engine(run.manifest.engine, mode, f"run {sdir}")
        setup = design_setup(sdir)
        loads = [ld for ld in recorded_loads(sdir) if setup.role(ld.name) != "warmup"]
        occupancy = load_occupancy(sdir)
        stalls = load_stalls(sdir)
        for ld in loads:
            held = setup.role(ld.name) == "check"
            if not held and not include_fit:
                continue
            cmp = compare_loads(profile, mode, [from_recorded(ld)], settings, seed=seed)[0]
            out.append(LoadCheck(mode, sdir.name, ld, cmp, not held, *occupancy.get(ld.name, (math.nan, math.nan)),
                                 *stalls.get(ld.name, (0, 0.0, math.nan))))
    return out


def load_occupancy(setup_dir: Path) -> dict[str, tuple[float, float]]:
    """Per load: (the engine's mean running requests over its steps, the clients' mean requests in
    flight). Where the second exceeds the first, requests sat in the engine's front-end (input and
    output processing), not in its batch."""
    import pandas as pd

    run = load_run(setup_dir)
    steps = run.table("steps")
    req = pd.read_parquet(Path(setup_dir) / "requests.parquet")
    out = {}
    for w in read_load_windows(setup_dir):
        s = steps[(steps["wall_time"] >= w.start_s) & (steps["wall_time"] <= w.end_s)]
        q = req[req["load"] == w.name]
        dur = w.end_s - w.start_s
        out[w.name] = (float(s["running"].mean()) if len(s) else math.nan, float((q["finish_s"] - q["arrival_s"]).sum() / dur) if dur > 0 else math.nan)
    return out


def load_stalls(setup_dir: Path) -> dict[str, tuple[int, float, float]]:
    """Per load: (first-use stalls among its busy steps, their summed excess in s, the load's duration in s)."""
    run = load_run(setup_dir)
    steps = run.table("steps")
    tokens = sum(steps[c] for c in ("prefill_tokens", "decode_tokens", "denoise_tokens", "commit_tokens", "verify_tokens"))
    stalls = first_use_stalls(steps[(tokens > 0) & steps["gap_ms"].notna()])
    return {w.name: (*stalls.within(w.start_s, w.end_s), w.end_s - w.start_s) for w in read_load_windows(setup_dir)}
