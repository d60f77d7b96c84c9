"""The simulator on the requests vLLM served: the same engine arrivals, prompt and output lengths,
the engine's own diffusion steps per canvas and MTP tokens per verify step, under the settings
vLLM's scheduler enforced (max_num_seqs, max_num_batched_tokens, KV blocks), priced by the profile
fitted from the separate calibration load. Every simulated step is traced for the step-by-step
comparison.

Time origin: the first engine arrival of the load (the scheduler's add_request), so simulated and
engine times share one clock.

`replay_recorded` tests the scheduling policy alone: every simulated step takes the duration of
the engine's step of the same index (its recorded `gap_ms`) and every request reaches the engine at
the step boundary at which the engine first saw it (its `engine_in_t`: vLLM's engine core takes
requests in between steps). Where the simulator's schedule is vLLM's, every request is then
admitted, first emits and finishes in the same engine step as in vLLM: what differs is the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from costmodel.engine_settings import EngineSettings, from_scheduler_config
from costmodel.modes import ServingMode
from costmodel.schemas.profile import Profile, frontend_latency_ms
from costmodel.schemas.engine_trace import EngineTrace
from simulate.metrics import FinishedRun, summarise
from simulate.sim import _Loop, deploy, simulate_point
from simulate.steptime import StepPricer
from simulate.prefix import trace_content
from simulate.workload import Requests

TRACE_COLUMNS = ("replica", "step", "start_s", "dt_s", "prefill_reqs", "prefill_tokens", "groups")


@dataclass
class Replayed:
    """The simulation of one recorded load: per request (arrival order) and per step."""

    requests: pd.DataFrame  # client_id, arrival_s, start_s, first_s, finish_s, steps (simulator records)
    steps: pd.DataFrame  # TRACE_COLUMNS, one row per simulated engine step
    t0: float  # the engine clock's origin (unix seconds)


def engine_config(config: dict, mode: ServingMode, **over) -> EngineSettings:
    """The simulator settings of the recorded scheduler (its config line: running cap, token budget,
    canvas or k, async scheduling, KV blocks x block size as KV tokens), priced at exact shapes."""
    kv = int(config.get("num_blocks") or 0) * int(config.get("block_size") or 0)
    # prefix caching as the server ran (records before it was logged ran with --no-enable-prefix-caching)
    s = from_scheduler_config(config, mode).with_values("recorded run: scheduler record config (num_blocks x block_size)",
                                                        kv_capacity_tokens=kv or None, async_scheduling=bool(config.get("async_scheduling", False)),
                                                        enable_prefix_caching=bool(config.get("enable_prefix_caching", False)))
    return replace(s, shape_bits=0).with_values("replay", **over).validate()


def trace_requests(trace: EngineTrace) -> tuple[Requests, float]:
    """The recorded requests as the simulator's Requests (engine arrival order), and the time origin."""
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    t0 = float(rq["arrival_t"].iloc[0])
    arr = rq["arrival_t"].to_numpy(float) - t0
    recorded = {}
    column = trace.serving.recorded_replay  # what the mode's draws replay (diffusion's steps per canvas, MTP's tokens per step)
    if column is not None:
        recorded[column] = [list(x) for x in rq[column]]
    window = float(arr[-1]) if len(arr) > 1 else 0.0
    qps = (len(arr) - 1) / window if window > 0 else 1.0
    out = np.maximum(rq["output_tokens"].to_numpy(np.int64), 1)
    reqs = Requests(arr, rq["prompt_tokens"].to_numpy(np.int64), out, np.zeros(len(rq), np.int64), ("R1",), window, qps,
                    recorded=recorded or None, content=recorded_content(trace, rq, out))
    return reqs, t0


def recorded_content(trace: EngineTrace, rq: pd.DataFrame, out: np.ndarray) -> list | None:
    """Each request's prompt as the blocks vLLM hashed (the recorder's `hashes`: one per full prompt
    block of the recorded block size), so the simulator's prefix cache looks up what vLLM's did;
    None when the record has none (prefix caching off)."""
    if "block_hashes" not in rq or not any(len(h) for h in rq["block_hashes"]):
        return None
    hb = hash_block_tokens(trace.config, rq)
    ids: dict = {}
    return [trace_content(i, int(p), int(o), [ids.setdefault(h, len(ids)) for h in hs], hb)
            for i, (p, o, hs) in enumerate(zip(rq["prompt_tokens"], out, rq["block_hashes"]))]


def trace_config(trace: EngineTrace) -> dict:
    """The scheduler's config line, with the hash unit of its recorded hashes (hash_block_tokens)."""
    rq = trace.requests
    if trace.config.get("hash_block_size") or "block_hashes" not in rq or not any(len(h) for h in rq["block_hashes"]):
        return trace.config
    return {**trace.config, "hash_block_size": hash_block_tokens(trace.config, rq)}


def hash_block_tokens(config: dict, rq: pd.DataFrame) -> int:
    """Tokens per recorded hash: vLLM hashes at its prefix-match unit (`hash_block_size`, the
    --block-size asked for), which can be finer than the KV block the attention backend runs (the
    CPU backend's 128): the config line says it; records without it are read by the one unit at
    which every request has prompt // unit hashes."""
    hb = int(config.get("hash_block_size") or 0)
    if hb:
        return hb
    bs = int(config.get("block_size") or 0)
    for unit in sorted({bs >> k for k in range(8) if bs >> k >= 1}, reverse=True):
        if all(len(h) == p // unit for p, h in zip(rq["prompt_tokens"], rq["block_hashes"])):
            return unit
    return bs


def replay(profile: Profile, trace: EngineTrace, **engine_over) -> Replayed:
    """Simulate the recorded load once (one replica, nothing left out as warm-up, no abort)."""
    reqs, t0 = trace_requests(trace)
    steps: list = []
    (_, df), _ = simulate_point(profile, trace.serving, reqs, replicas=1, cfg=engine_config(trace_config(trace), trace.serving, **engine_over), router="least-outstanding",
                                seed=0, warmup_frac=0.0, abort_backlog_s=None, drain_s=None, workload_desc="vLLM recorded load",
                                step_trace=steps)
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    sim = pd.DataFrame({"client_id": rq["client_id"], "arrival_s": reqs.arrival_s})
    _engine_columns(sim, df, profile, trace.mode)
    return Replayed(sim, pd.DataFrame(steps, columns=list(TRACE_COLUMNS)), t0)


def _engine_columns(sim: pd.DataFrame, df: pd.DataFrame, profile: Profile, mode: str) -> None:
    """The simulator's per-request columns on the engine's clock: the recorder's times are the
    engine's (costmodel/schemas/engine_trace.py), so the front-end latency the profile may carry (which the
    records add to the first token and the finish, as the client sees them) is taken off again; the
    client's rows add the fitted front-end latency themselves (score.load_scores)."""
    fe = frontend_latency_ms(profile, mode) / 1e3
    for col in ("start_s", "first_token_s", "finish_s", "steps", "cached_tokens"):
        if col in df:
            v = df[col].to_numpy()
            sim[col] = v - fe if fe and col in ("first_token_s", "finish_s") else v


class RecordedStepPricer(StepPricer):
    """The engine's own step durations, in step order (after the last: the profile's price)."""

    def __init__(self, base: StepPricer, durations_s: list[float]):
        super().__init__(base.profile, base.mode, base.draws, 0)
        self.base, self.durations_s, self.i = base, list(durations_s), 0

    def price(self, m, tp, psum, ns, ss):
        i = self.i
        self.i = i + 1
        return self.durations_s[i] if i < len(self.durations_s) else self.base.price(m, tp, psum, ns, ss)

    def price_part(self, ns, ss, g, tokens, ctx):
        i = self.i
        self.i = i + 1
        return self.durations_s[i] if i < len(self.durations_s) else self.base.price_part(ns, ss, g, tokens, ctx)


BOUNDARY_EPS_S = 5e-5  # far below any step (milliseconds), far above float error


def boundary_arrivals(trace: EngineTrace) -> np.ndarray:
    """Each request's arrival at the engine step boundary where vLLM first saw it (unix s, arrival
    order): just before the start of the first step after its engine_in_t; one more epsilon earlier
    when the engine was busy up to that step (so it is in the queue when the simulated step before
    it ends, at the same instant), the plain epsilon when it was idle (its arrival starts the step)."""
    st = trace.steps.sort_values("step")
    t0 = st["t0_s"].to_numpy(float)
    end = t0 + st["gap_ms"].to_numpy(float) / 1e3
    busy_before = np.r_[False, np.abs(end[:-1] - t0[1:]) < 1e-9]
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    j = np.minimum(np.searchsorted(t0, rq["engine_in_t"].to_numpy(float), side="left"), len(t0) - 1)
    return t0[j] - BOUNDARY_EPS_S * (1 + busy_before[j])


def replay_recorded(profile: Profile, trace: EngineTrace, **engine_over) -> Replayed:
    """The recorded load with the engine's own step durations and step-boundary arrivals (see the
    module docstring): the simulator's schedule against vLLM's, step time held out. `engine_over`:
    settings other than the recorded ones (what-ifs, tests)."""
    reqs, _ = trace_requests(trace)
    arr = boundary_arrivals(trace)
    t0 = float(arr.min())
    order = np.argsort(arr - t0, kind="stable")
    reqs = replace(reqs, arrival_s=(arr - t0)[order], prompt_tokens=reqs.prompt_tokens[order], output_tokens=reqs.output_tokens[order],
                   recorded={k: [v[i] for i in order] for k, v in (reqs.recorded or {}).items()} or None,
                   content=[reqs.content[i] for i in order] if reqs.content is not None else None)
    dep = deploy(profile, trace.serving, reqs, engine_config(trace_config(trace), trace.serving, **engine_over), 0)
    dep.pricer = RecordedStepPricer(dep.pricer, (trace.steps.sort_values("step")["gap_ms"].to_numpy(float) / 1e3).tolist())
    steps: list = []
    loop = _Loop(dep, reqs, 1, "least-outstanding", None, 1e6, steps)
    t_end = loop.run()
    _, records = summarise(FinishedRun(mode=dep.mode, profile=profile, reqs=reqs, draws=dep.draws, cfg=dep.cfg, limits=dep.limits,
                                  replicas=loop.reps, rec=loop.rec, tracker=loop.tracker, n_arrived=loop.arrived, t_end=t_end, warmup_s=0.0,
                                  abort=loop.abort, drain_s=1e6, seed=0, kv_cap=dep.kv_cap, router="least-outstanding",
                                  workload_desc="vLLM recorded load, engine step times"))
    df = records.frame()  # summarise gives metrics.RequestRecords, column by column
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    sim = pd.DataFrame({"client_id": rq["client_id"].to_numpy()[order], "arrival_s": reqs.arrival_s})
    _engine_columns(sim, df, profile, trace.mode)
    inv = np.argsort(order)  # back to the trace's arrival order
    return Replayed(sim.iloc[inv].reset_index(drop=True), pd.DataFrame(steps, columns=list(TRACE_COLUMNS)), t0)


def capacity_rps(profile: Profile, mode: ServingMode, config: dict, prompt_tokens: np.ndarray, output_tokens: np.ndarray, n: int = 400) -> float:
    """Requests per second one replica serves with every request waiting from t = 0 (the profile's
    own draws): the saturation throughput the loads' rates are fractions of."""
    rng = np.random.default_rng(0)
    i = rng.integers(0, len(prompt_tokens), n)
    reqs = Requests(np.zeros(n), np.asarray(prompt_tokens)[i].astype(np.int64), np.asarray(output_tokens)[i].astype(np.int64),
                    np.zeros(n, np.int64), ("R1",), 0.0, 1.0)
    (_, df), _ = simulate_point(profile, mode, reqs, replicas=1, cfg=engine_config(config, mode), router="least-outstanding", seed=0,
                                warmup_frac=0.0, abort_backlog_s=None, drain_s=1e6, workload_desc="capacity burst")
    fin = df["finish_s"].to_numpy(float)
    fin = np.sort(fin[np.isfinite(fin)])
    # the steady middle of the drain: leave out the ramp-up and the tail where the batch empties
    lo, hi = int(0.2 * len(fin)), int(0.8 * len(fin))
    return float((hi - lo) / (fin[hi] - fin[lo]))
