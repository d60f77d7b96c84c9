"""Scores of the simulator against vLLM's scheduler on one recorded load: per load, per step, per
request. Every time is on the engine's clock (the scheduler's add_request and the end of the step
that emitted), which is what the simulator models; the client's view adds the API server's
HTTP/SSE time and is reported beside it (`client_*` rows, the calibration's median front-end
overhead added to the simulated latencies), without targets.

Targets (issue 16), below saturation: throughput within 3%, p50 TTFT and E2E within 5%, p99 within
10%, engine-step count within 2%.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from costmodel.schemas.engine_trace import EngineTrace
from simulate.validate.vllm.replay import Replayed

TARGETS_PCT = {"throughput_rps": 3.0, "ttft_ms_p50": 5.0, "e2e_ms_p50": 5.0, "ttft_ms_p99": 10.0, "e2e_ms_p99": 10.0, "engine_steps": 2.0}
QUANTILES = {"p50": 50, "p95": 95, "p99": 99}


@dataclass
class Score:
    mode: str
    load: str
    metric: str
    measured: float
    predicted: float
    rel_error_pct: float
    target_pct: float | None
    met: bool | None
    pricing: str = "calibration"  # step prices: the calibration's fit, or ("own steps") the load's own (diagnosis)


def _score(mode: str, load: str, metric: str, measured: float, predicted: float) -> Score:
    err = 100.0 * (predicted - measured) / measured if measured else float("nan")
    tgt = TARGETS_PCT.get(metric)
    return Score(mode, load, metric, float(measured), float(predicted), err, tgt, None if tgt is None else bool(abs(err) <= tgt))


def _latencies(arrival, first, finish) -> dict[str, np.ndarray]:
    return {"ttft_ms": (np.asarray(first, float) - np.asarray(arrival, float)) * 1e3,
            "e2e_ms": (np.asarray(finish, float) - np.asarray(arrival, float)) * 1e3}


def _throughput(arrival, finish) -> float:
    fin = np.asarray(finish, float)
    ok = np.isfinite(fin)
    span = fin[ok].max() - np.asarray(arrival, float).min()
    return float(ok.sum() / span) if span > 0 else float("nan")


def load_scores(trace: EngineTrace, rep: Replayed, load: str, frontend_ms: dict[str, float] | None = None,
                client: pd.DataFrame | None = None) -> list[Score]:
    """Throughput, TTFT and E2E percentiles, engine steps; client rows when the client's requests are given."""
    mode = trace.mode
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    sim = rep.requests
    m_arr = rq["arrival_t"].to_numpy(float) - rep.t0
    meas = _latencies(m_arr, rq["first_t"] - rep.t0, rq["finish_t"] - rep.t0)
    pred = _latencies(sim["arrival_s"], sim["first_token_s"], sim["finish_s"])
    out = [_score(mode, load, "throughput_rps", _throughput(m_arr, rq["finish_t"] - rep.t0), _throughput(sim["arrival_s"], sim["finish_s"]))]
    for name in ("ttft_ms", "e2e_ms"):
        for q, p in QUANTILES.items():
            out.append(_score(mode, load, f"{name}_{q}", np.nanpercentile(meas[name], p), np.nanpercentile(pred[name], p)))
    out.append(_score(mode, load, "engine_steps", len(trace.steps), len(rep.steps)))
    if client is not None and frontend_ms:
        cl = client.set_index("request_id")
        ids = [c for c in rq["client_id"] if c in cl.index]
        sel = sim.set_index("client_id").loc[ids]
        ps = _latencies(sel["arrival_s"], sel["first_token_s"], sel["finish_s"])
        for name in ("ttft_ms", "e2e_ms"):
            got = cl.loc[ids, name].to_numpy(float)
            for q in ("p50", "p99"):
                out.append(_score(mode, load, f"client_{name}_{q}", np.nanpercentile(got, QUANTILES[q]),
                                  np.nanpercentile(ps[name] + frontend_ms[name], QUANTILES[q])))
    return out


def frontend_overhead_ms(trace: EngineTrace, client: pd.DataFrame) -> dict[str, float]:
    """Median client-minus-engine latency over the requests of a load's first unit (the
    calibration's low rate: no burst queueing in the API server): its HTTP, tokenisation,
    detokenisation and SSE time plus the client's own, added to simulated latencies for the client rows."""
    rq = trace.requests.set_index("client_id")
    if "unit" in client:
        client = client[client["unit"] == client["unit"].iloc[0]]
    cl = client.set_index("request_id")
    ids = [c for c in rq.index if c in cl.index]
    eng = _latencies(rq.loc[ids, "arrival_t"], rq.loc[ids, "first_t"], rq.loc[ids, "finish_t"])
    return {name: float(np.nanmedian(cl.loc[ids, name].to_numpy(float) - eng[name])) for name in ("ttft_ms", "e2e_ms")}


def step_table(trace: EngineTrace, rep: Replayed, load: str) -> pd.DataFrame:
    """Per step, engine vs simulator: steps, mean requests and tokens per step by kind, step-time quantiles."""
    mode, phases = trace.mode, trace.serving.engine_phases  # the recorder's request phases, prefill first
    es = trace.steps
    ss = rep.steps
    groups = np.array([list(g) for g in ss["groups"]], float).reshape(len(ss), -1)
    sim_kind = {phases[0]: (ss["prefill_reqs"].to_numpy(float), ss["prefill_tokens"].to_numpy(float))}
    for i, kind in enumerate(phases[1:]):
        n = groups[:, i] if groups.shape[1] > i else np.zeros(len(ss))
        # tokens per sequence of a decode-phase kind are fixed (canvas, 1, k+1): the engine's own ratio
        per_seq = es[f"{kind}_tokens"].sum() / max(es[f"{kind}_reqs"].sum(), 1)
        sim_kind[kind] = (n, n * per_seq)
    rows = [{"mode": mode, "load": load, "quantity": "engine_steps", "engine": len(es), "simulator": len(ss)}]
    for kind in phases:
        rows.append({"mode": mode, "load": load, "quantity": f"{kind}_reqs_per_step", "engine": es[f"{kind}_reqs"].mean(),
                     "simulator": float(np.mean(sim_kind[kind][0])) if len(ss) else float("nan")})
        rows.append({"mode": mode, "load": load, "quantity": f"{kind}_tokens_per_step", "engine": es[f"{kind}_tokens"].mean(),
                     "simulator": float(np.mean(sim_kind[kind][1])) if len(ss) else float("nan")})
    for q in (10, 50, 90, 99):
        rows.append({"mode": mode, "load": load, "quantity": f"step_ms_p{q}", "engine": float(np.percentile(es["gap_ms"], q)),
                     "simulator": float(np.percentile(ss["dt_s"] * 1e3, q)) if len(ss) else float("nan")})
    rows.append({"mode": mode, "load": load, "quantity": "busy_s", "engine": float(es["gap_ms"].sum() / 1e3), "simulator": float(ss["dt_s"].sum())})
    df = pd.DataFrame(rows)
    df["rel_error_pct"] = 100.0 * (df["simulator"] - df["engine"]) / df["engine"].where(df["engine"] != 0)
    return df


def request_table(trace: EngineTrace, rep: Replayed, load: str) -> pd.DataFrame:
    """Per request: the step at which it was admitted, first emitted and finished, engine vs simulator
    (the simulator's steps located by their start and end times in its step trace)."""
    rq = trace.requests.sort_values("arrival_t").reset_index(drop=True)
    base = int(trace.steps["step"].min())  # the server's step counter runs on across loads
    ss = rep.steps.sort_values("start_s")
    starts = ss["start_s"].to_numpy(float)
    ends = starts + ss["dt_s"].to_numpy(float)

    def at_start(t):
        return np.searchsorted(starts, np.asarray(t, float) - 1e-12, side="left")

    def at_end(t):
        return np.searchsorted(ends, np.asarray(t, float) - 1e-9, side="left")

    sim = rep.requests
    return pd.DataFrame({
        "mode": trace.mode, "load": load, "client_id": rq["client_id"],
        "admit_step": rq["admit_step"] - base, "admit_step_sim": at_start(sim["start_s"]),
        "first_step": rq["first_step"] - base, "first_step_sim": at_end(sim["first_token_s"]),
        "finish_step": rq["finish_step"] - base, "finish_step_sim": at_end(sim["finish_s"]),
        "engine_steps": rq["n_steps"], "engine_steps_sim": sim["steps"] if "steps" in sim else np.nan,
        "cached_tokens": rq["cached_tokens"] if "cached_tokens" in rq else -1,
        "cached_tokens_sim": sim["cached_tokens"] if "cached_tokens" in sim else np.nan,
    })


def request_summary(req: pd.DataFrame) -> dict:
    """Per request, engine vs simulator: the share whose admit / first / finish step index matches
    exactly and the mean |difference| in steps (these move with every step time), and the share whose
    step structure matches: steps from admission to first output and to the finish, and steps taken
    part in (these depend on the policy alone while batches stay below the token budget)."""
    out = {}
    for k in ("admit_step", "first_step", "finish_step"):
        d = (req[f"{k}_sim"] - req[k]).abs()
        out[f"{k}_exact_pct"] = float(100 * (d == 0).mean())
        out[f"{k}_mean_abs_diff"] = float(d.mean())
    for k in ("first_step", "finish_step"):
        same = (req[f"{k}_sim"] - req["admit_step_sim"]) == (req[k] - req["admit_step"])
        out[f"admit_to_{k.split('_')[0]}_steps_same_pct"] = float(100 * same.mean())
    out["steps_per_request_same_pct"] = float(100 * (req["engine_steps_sim"] == req["engine_steps"]).mean())
    out.update(cached_summary(req))
    return out


# prefix caching (issue 32): the share of requests whose cached tokens (vLLM's num_cached_tokens at first
# admission) the simulator matches, on loads recorded with prefix caching on
CACHED_TARGET_PCT = 95.0


def cached_summary(req: pd.DataFrame) -> dict:
    """Over the requests of loads with a recorded hit field and prefix sharing: the share whose
    simulated cached tokens equal vLLM's, and the tokens vLLM and the simulator found cached."""
    if "cached_tokens" not in req:
        return {}
    r = req[req["cached_tokens"] >= 0]
    r = r[r.groupby("load")["cached_tokens"].transform("max") > 0]  # loads that share prefixes
    if not len(r):
        return {}
    return {"cached_tokens_same_pct": float(100 * (r["cached_tokens_sim"] == r["cached_tokens"]).mean()),
            "cached_tokens_vllm": int(r["cached_tokens"].sum()), "cached_tokens_sim": int(r["cached_tokens_sim"].sum())}


# the scheduling model's targets (issue 29), on the replay with the engine's own step times
SCHEDULE_TARGETS = {"on_schedule_pct": 95.0, "engine_steps_abs_err_pct": 3.0}


def schedule_row(trace: EngineTrace, rep: Replayed, load: str) -> tuple[dict, pd.DataFrame]:
    """The simulator's schedule against vLLM's with step time held out (replay.replay_recorded):
    a request is on vLLM's schedule when it is admitted, first emits and finishes in the same engine
    step as in vLLM and takes part in as many steps. Returns the load's row and its request table."""
    rt = request_table(trace, rep, load)
    on = ((rt["admit_step"] == rt["admit_step_sim"]) & (rt["first_step"] == rt["first_step_sim"])
          & (rt["finish_step"] == rt["finish_step_sim"]) & (rt["engine_steps"] == rt["engine_steps_sim"]))
    n_e, n_s = len(trace.steps), len(rep.steps)
    row = {"mode": trace.mode, "load": load, "requests": len(rt), "on_schedule_pct": float(100 * on.mean()), "engine_steps": n_e,
           "engine_steps_sim": n_s, "engine_steps_err_pct": 100.0 * (n_s - n_e) / n_e if n_e else float("nan")}
    return row, rt.assign(on_schedule=on)


def scores_frame(scores: list[Score]) -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in scores])
