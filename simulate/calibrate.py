"""A profile's engine step term calibrated to an observed batch-1 throughput, by simulation.

Why: a profile composed from kernel timings (the ops what-ifs) prices the GPU alone; vLLM spends more on
every engine step (host work, its own kernels and launches). Where only an end-to-end figure of the
engine is known - a `vllm bench serve` result at `--max-concurrency 1`, imported with `costmodel
import-bench` - the missing time per step is identifiable: at concurrency 1 a request's latency is
the sum of its steps, so it grows linearly in a constant per-step term c. Two simulations of the
figure's workload (c = 0 and c = 1 ms) give the intercept and the steps per request, and c follows
in closed form; a third checks it. The term is written net of overlap (the figure already holds
whatever async scheduling hid), so it is added in full whatever the engine setting
(costmodel/stepcost/host_overhead.py).

`costmodel fit --calibrate RUN --profile P --apply-to MODES` drives it (`calibrate_bench`, run by
pipeline/fit.py on the run measure's fit checked): the constant fitted on the run's mode can be
applied to other modes of the same engine, whose own figures then stay a held-out check
(`benchmarks/bench_published.py`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from costmodel.engine_settings import EngineSettings
from costmodel.errors import UserError
from costmodel.schemas.bench_result import BENCH_KIND
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import Run
from costmodel.stepcost.host_overhead import with_step_constant
from simulate.engine_recorded import recorded_settings
from simulate.point import run_point
from simulate.workload import parse_workload

QPS = 1e-6  # one arrival per ~12 simulated days: requests never overlap (concurrency 1)
N_REQUESTS = 8  # fixed lengths: the mean converges fast (commit and acceptance draws vary per request)


@dataclass(frozen=True)
class Batch1Figure:
    """One observed concurrency-1 run: its fixed lengths and output throughput."""

    mode: str
    prompt_tokens: int
    output_tokens: int
    output_tok_s: float
    where: str  # the run and unit it came from
    label: str = ""  # the bench result's own label

    @property
    def e2e_s(self) -> float:
        """Mean end-to-end latency: at concurrency 1 vllm bench's output throughput is output tokens / mean E2E."""
        return self.output_tokens / self.output_tok_s


@dataclass(frozen=True)
class StepConstantFit:
    figure: Batch1Figure
    ms: float  # the constant per engine step
    steps_per_request: float
    tok_s_before: float  # the profile's prediction without the term
    tok_s_after: float  # with it (the check)

    def describe(self) -> str:
        f = self.figure
        return (f"{f.mode}: engine step term {self.ms:.3f} ms per step ({self.steps_per_request:.0f} steps per request) from {f.where}: "
                f"observed {f.output_tok_s:g} output tok/s, profile {self.tok_s_before:.1f} before, {self.tok_s_after:.1f} after "
                f"({100 * (self.tok_s_after / f.output_tok_s - 1):+.2f}%)")


def batch1_figures(run: Run) -> list[Batch1Figure]:
    """The concurrency-1 loads of a bench-import run (others refused: their latency is not a sum of one request's steps)."""
    if run.manifest.kind != BENCH_KIND:
        raise UserError(f"calibration run {run.path} is a {run.manifest.kind} run, not a bench import",
                        "import the `vllm bench serve --save-result` file with costmodel import-bench first")
    df = run.table("load_summary")
    out = []
    for i, r in enumerate(df.itertuples()):
        where = f"bench import {run.manifest.run_id} load {i}"
        if int(r.concurrency) != 1:
            raise UserError(f"{run.path} load {i} ran at --max-concurrency {int(r.concurrency) or 'unbounded'}",
                            "calibrate on a `vllm bench serve --max-concurrency 1` result (a request's latency is then the sum of its steps)")
        done = int(r.completed)
        vals = (float(r.total_input_tokens), float(r.total_output_tokens), float(r.output_throughput_tok_s))
        if done < 1 or not all(math.isfinite(v) and v > 0 for v in vals):
            raise UserError(f"{run.path} load {i} lacks completed requests, total_input_tokens, total_output_tokens or output_throughput",
                            "calibrate on a complete `vllm bench serve --save-result` file")
        out.append(Batch1Figure(run.manifest.mode, round(vals[0] / done), round(vals[1] / done), vals[2], where, str(getattr(r, "bench_label", ""))))
    if not out:
        raise UserError(f"calibration run {run.path} holds no load", "import a bench result with at least one load")
    return out


def predicted_tok_s(profile: Profile, fig: Batch1Figure, engine: EngineSettings | None, n_requests: int = N_REQUESTS,
                    regime: str | None = None) -> tuple[float, bool]:
    """(output tok/s at concurrency 1 on `profile`, whether two simulated requests overlapped);
    `regime`: every request of one commit regime (default: the workload's mix)."""
    wl = parse_workload({"prompt_tokens": fig.prompt_tokens, "output_tokens": fig.output_tokens, **({"regime_mix": {regime: 1}} if regime else {})},
                        f"the workload of {fig.where}")
    res = run_point(profile, fig.mode, QPS, n_requests=n_requests, seed=0, engine=engine, workload=wl, warmup_frac=0.0, abort_backlog_s=None)
    df = res.requests
    starts, ends = df["arrival_s"].to_numpy(), df["finish_s"].to_numpy()
    order = starts.argsort()
    overlap = bool((starts[order][1:] < ends[order][:-1]).any())
    return fig.output_tokens / (df["e2e_ms"].to_numpy().mean() / 1e3), overlap


def fit_step_constant(profile: Profile, fig: Batch1Figure, engine: EngineSettings | None = None) -> StepConstantFit:
    """The constant per-step term that makes `profile` reproduce `fig` (refused when it would be negative)."""
    if fig.mode not in profile.modes:
        raise UserError(f"{fig.where} is a {fig.mode} figure; profile {profile.profile_id} has no {fig.mode} mode",
                        f"calibrate a profile with modes {', '.join(profile.modes)}")
    trial = {ms: with_step_constant(profile, [fig.mode], ms, "trial") for ms in (0.0, 1.0)}
    e2e = {}
    for ms, p in trial.items():
        tok_s, overlap = predicted_tok_s(p, fig, engine)
        if overlap:
            raise UserError(f"{fig.where}: simulated requests overlapped at {QPS:g} QPS", "report this: concurrency 1 could not be simulated")
        e2e[ms] = fig.output_tokens / tok_s
    steps = (e2e[1.0] - e2e[0.0]) * 1e3  # seconds per request per ms of term -> steps per request
    ms = (fig.e2e_s - e2e[0.0]) * 1e3 / steps
    before = fig.output_tokens / e2e[0.0]
    if ms < 0:
        raise UserError(f"{fig.where}: the observed {fig.output_tok_s:g} output tok/s is faster than profile {profile.profile_id} "
                        f"predicts without any engine term ({before:.1f}): the step term would be {ms:.3f} ms",
                        "calibrate a profile of the run's GPU and precision (or refit its pass costs first)")
    after, _ = predicted_tok_s(with_step_constant(profile, [fig.mode], ms, "check"), fig, engine)
    return StepConstantFit(fig, ms, steps, before, after)


def frontend_latency_fit(profile: Profile, mode: str, loads: list, engine: EngineSettings | None = None,
                         engines: list[EngineSettings | None] | None = None) -> dict:
    """The engine front-end's latency per request (what vLLM's input and output processing add to
    every first token and finish, as the client sees them) fitted by simulation: the median of each
    low-load load's measured TTFT p50 less its simulated one (no front-end term), floored at 0.
    `loads`: simulate.compare.MeasuredLoad of the engine at low load (queueing would otherwise be
    taken for front-end time), served with `engine`, or each with its own `engines[i]` (loads of
    several engine starts). Returns the profile-engine record {"ms", "loads", "residuals_ms"}."""
    from costmodel.schemas.profile import FRONTEND_LATENCY_KEY
    from simulate.compare import compare_loads

    bare = copy.deepcopy(profile)
    eng = bare.engine if isinstance(bare.engine, dict) else {}
    (eng.get(FRONTEND_LATENCY_KEY) or {}).pop(mode, None)
    bare.__dict__.pop("_resolved", None)
    engines = engines if engines is not None else [engine] * len(loads)
    cmps = [c for ld, e in zip(loads, engines) for c in compare_loads(bare, mode, [ld], e)]
    res = [c.measured("ttft_p50_ms") - c.predicted("ttft_p50_ms") for c in cmps]
    res = [r for r in res if r == r]
    if not res:
        raise UserError(f"{mode}: no low-load load with a measured TTFT to fit the front-end latency on", "record a low-rate Poisson load")
    ms = max(0.0, float(np.median(res)))
    return {"ms": round(ms, 2), "loads": [ld.label for ld in loads], "residuals_ms": [round(r, 2) for r in res],
            "method": "median over low-load loads of measured TTFT p50 - simulated TTFT p50 (simulate/calibrate.py frontend_latency_fit)"}


HANDOVER_MIN_CLIENTS = 4  # an opening burst of fewer sends gives one or two gaps


def frontend_handover_fit(bursts: list[tuple[str, tuple]]) -> dict | None:
    """The front end's per-request handover (ms): how long vLLM's AsyncLLM takes to hand one request to the
    engine core, the next waiting behind it. Read off the recorded opening bursts of closed loops: the clients
    send in the front end's own event loop, so each of a burst's sends is made once the request before it was
    handed over, and the gap between consecutive sends is one handover. `bursts`: (label, the burst's send times
    in s) per closed loop of at least HANDOVER_MIN_CLIENTS clients; per burst the median gap after the first (the
    first request's is longer: the loop's first pass), then the median over bursts. None without a burst.
    Returns the profile-engine record {"ms", "loads", "per_burst_ms", "method"}."""
    per = []
    for label, sends in bursts:
        gaps = np.diff(np.sort(np.asarray(sends, float)))[1:]
        if len(gaps):
            per.append((label, float(np.median(gaps)) * 1e3))
    if not per:
        return None
    ms = float(np.median([g for _, g in per]))
    return {"ms": round(ms, 3), "loads": [lb for lb, _ in per], "per_burst_ms": [round(g, 3) for _, g in per],
            "method": "median over closed loops' opening bursts of the median gap between consecutive sends "
                      "(simulate/calibrate.py frontend_handover_fit)"}


def engine_pickup_fit(bursts: list[tuple[str, tuple, int | None]], handover_ms: float) -> dict | None:
    """How long an idle engine core takes from the request that wakes it to its first step (ms), which takes
    every request handed over by then. Read off the recorded opening bursts: (label, send times in s, the
    requests the engine's first prefill step held, None where that step was full - its token budget, not its
    start, decided - or held the whole burst). A burst's first step held its first k sends and not the next:
    the pickup lies between the k-th send's time after the first and the (k+1)-th's; per burst the middle,
    then the median over bursts. The sends are already a handover apart (frontend_handover_fit), so the same
    spacing holds at the engine. None without a burst. Returns {"ms", "loads", "per_burst_ms", "method"}."""
    per = []
    for label, sends, k1 in bursts:
        s = np.sort(np.asarray(sends, float)) * 1e3
        if k1 is None or not 1 <= k1 < len(s):
            continue
        per.append((label, float((s[k1 - 1] + s[k1]) / 2 - s[0])))
    if not per:
        return None
    ms = float(np.median([g for _, g in per]))
    return {"ms": round(ms, 3), "loads": [lb for lb, _ in per], "per_burst_ms": [round(g, 3) for _, g in per], "handover_ms": handover_ms,
            "method": "median over closed loops' opening bursts of the middle between the last send the engine's first step held "
                      "and the next, after the first send (simulate/calibrate.py engine_pickup_fit)"}


def calibrate_bench(base: Profile, runs: list[Run], apply_to: str | None) -> tuple[Profile, list[str]]:
    """The constant step term of one concurrency-1 bench import, on its mode and the --apply-to modes.
    The run is of `base`'s model and GPU (measure's fit checked it: measure/fit/calibrate.py check_same_setup)."""
    if len(runs) != 1 or len(figs := batch1_figures(runs[0])) != 1:
        raise UserError("--calibrate on bench imports takes one run of one load (one mode's concurrency-1 figure)",
                        "import the one `vllm bench serve --max-concurrency 1` result to calibrate on")
    fig = figs[0]
    _, recorded = recorded_settings(runs[0].path)  # the server's settings the import carries (a canvas from its counters)
    fitted = fit_step_constant(base, fig, recorded)
    modes = list(base.modes) if apply_to == "all" else [m.strip() for m in (apply_to or fig.mode).split(",") if m.strip()]
    if fig.mode not in modes:
        modes.insert(0, fig.mode)
    src = (f"calibrated: constant engine step term fitted to {fig.where} ({fig.mode}, {fig.prompt_tokens}/{fig.output_tokens} tokens, "
           f"concurrency 1, {fig.output_tok_s:g} output tok/s; bench label {fig.label!r})"
           + ("" if modes == [fig.mode] else f", applied to {', '.join(m for m in modes if m != fig.mode)} as the same engine's step work"))
    prof = with_step_constant(base, modes, round(fitted.ms, 4), src, [runs[0].manifest.run_id])
    prof.profile_id = f"{base.profile_id}-calibrated"
    msgs = [fitted.describe(), f"term applied to {', '.join(modes)} (net of overlap: added in full under async scheduling)"]
    prof.notes = list(prof.notes) + [f"calibrate: {m}" for m in msgs]
    return prof, msgs
