"""Summaries of one load: the `load_summary` row an endpoint run writes per unit, with the same
latency names `vllm bench serve` uses (mean/median/std/pNN _ttft_ms, _tpot_ms, _itl_ms, _e2el_ms)
so that imported bench results and measured loads read alike.

- Latencies are over successful requests only; failures are counted by reason.
- ITL is pooled: every gap between successive output events of every successful request is one
  sample (as in `vllm bench serve`); TPOT is per request, (e2e - ttft) / (output_tokens - 1).
- duration_s runs from the first scheduled arrival to the last request's end; throughputs divide
  successful requests / output tokens by it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


def describe(xs, name: str) -> dict[str, float]:
    """mean/median/std/pNN of one latency metric (ms), vLLM's key names; NaN when empty."""
    a = np.asarray([x for x in xs if x is not None and not math.isnan(x)], dtype=float)
    out = {f"mean_{name}_ms": math.nan, f"median_{name}_ms": math.nan, f"std_{name}_ms": math.nan}
    out.update({f"p{p}_{name}_ms": math.nan for p in PERCENTILES})
    if a.size:
        out[f"mean_{name}_ms"] = float(a.mean())
        out[f"median_{name}_ms"] = float(np.median(a))
        out[f"std_{name}_ms"] = float(a.std())
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = float(np.percentile(a, p))
    return out


def chunk_gaps_ms(chunks: pd.DataFrame, request_ids=None) -> np.ndarray:
    """Gaps between successive output events within each request (pooled), in ms."""
    if chunks.empty:
        return np.zeros(0)
    c = chunks if request_ids is None else chunks[chunks["request_id"].isin(set(request_ids))]
    if c.empty:
        return np.zeros(0)
    c = c.sort_values(["request_id", "chunk_index"])
    d = c.groupby("request_id", sort=False)["t_s"].diff().dropna().to_numpy()
    return d * 1e3


def burst_tokens_median(chunks: pd.DataFrame, ok: pd.DataFrame) -> float:
    """Median tokens of the output events of successful requests, each request's last event
    excluded (it may be a partial canvas); NaN unless token counts came from usage/logprobs.
    For a diffusion server this is its canvas length."""
    if chunks.empty or ok.empty or "tokens_source" not in ok:
        return math.nan
    ids = ok.loc[ok["tokens_source"].isin(["usage", "logprobs"]), "request_id"]
    c = chunks[chunks["request_id"].isin(set(ids))]
    if c.empty:
        return math.nan
    last = c.groupby("request_id")["chunk_index"].transform("max")
    c = c[c["chunk_index"] < last]
    return float(np.median(c["tokens"].to_numpy(dtype=float))) if len(c) else math.nan


def summarize(requests: pd.DataFrame, chunks: pd.DataFrame) -> dict:
    """Counts, throughputs, latency statistics and client lateness of one load."""
    ok = requests[requests["status"] == "ok"]
    failed = requests[requests["status"] != "ok"]
    if len(requests):
        duration = float(np.nanmax(requests["finish_s"].to_numpy(dtype=float)) - np.nanmin(requests["arrival_s"].to_numpy(dtype=float)))
    else:
        duration = 0.0
    out_tokens = float(ok["output_tokens"].sum()) if len(ok) else 0.0
    in_tokens = float(ok["prompt_tokens"].sum(min_count=1)) if len(ok) and ok["prompt_tokens"].notna().any() else math.nan
    s: dict = {
        "completed": int(len(ok)),
        "failed": int(len(failed)),
        "duration_s": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput_rps": len(ok) / duration if duration > 0 else math.nan,
        "output_throughput_tok_s": out_tokens / duration if duration > 0 else math.nan,
        "total_token_throughput_tok_s": (out_tokens + (0 if math.isnan(in_tokens) else in_tokens)) / duration if duration > 0 else math.nan,
        "failure_reasons": {str(k): int(v) for k, v in failed["failure_reason"].value_counts().items()} if len(failed) else {},
    }
    s.update(describe(ok["ttft_ms"], "ttft"))
    s.update(describe(ok["tpot_ms"], "tpot"))
    s.update(describe(chunk_gaps_ms(chunks, ok["request_id"]), "itl"))
    s.update(describe(ok["e2e_ms"], "e2el"))
    late = requests["lateness_ms"].to_numpy(dtype=float) if len(requests) else np.zeros(0)
    late = late[~np.isnan(late)]
    s["lateness_p50_ms"] = float(np.percentile(late, 50)) if late.size else math.nan
    s["lateness_p99_ms"] = float(np.percentile(late, 99)) if late.size else math.nan
    s["lateness_max_ms"] = float(late.max()) if late.size else math.nan
    s["client_event_tokens_median"] = burst_tokens_median(chunks, ok)
    wait = requests["wait_ms"].to_numpy(dtype=float) if len(requests) else np.zeros(0)
    wait = wait[~np.isnan(wait)]
    s["concurrency_wait_p99_ms"] = float(np.percentile(wait, 99)) if wait.size else math.nan
    return s
