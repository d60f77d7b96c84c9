"""The loads a GPU engine run served (measure/vllm/gpu_run.py's layout), read back without vLLM:
each load's time window (to keep its steps out of a fit) and its requests and measured figures
(to check a profile on it), computed as `vllm bench serve` computes them.

    for load in recorded_loads(Path("data/runs/engine/h200-fp8-ar/default")):
        load.name, load.kind, load.concurrency, load.tok_s, load.ttft_p50_ms, load.tpot_p50_ms
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError


@dataclass(frozen=True)
class LoadWindow:
    name: str
    start_s: float  # wall clock (time.time()), as the step recorder's wall_time
    end_s: float


@dataclass(frozen=True)
class RecordedLoad:
    """One load as sent and as measured. Lengths and send times per request in send order (send
    times relative to the load's first send)."""

    name: str
    kind: str  # closed | poisson | gamma (bursty open arrivals; replayed at their recorded send times like Poisson)
    concurrency: int | None
    rate_rps: float | None
    prompt_tokens: tuple
    output_tokens: tuple
    send_s: tuple
    tok_s: float  # output tokens / (last finish - first send)
    ttft_p50_ms: float
    ttft_p95_ms: float
    tpot_p50_ms: float  # median over requests of more than one output token of (e2e - ttft) / (output - 1)
    refused: int
    ttft_ms: tuple = ()  # each request's time to first token, in send order (NaN: none)


SAME_REQUESTS = ("name", "kind", "n", "concurrency", "rate_rps", "arrival_cv", "prompt_tokens", "output_tokens", "seed")


def requests_key(load: dict) -> str:
    """What makes two recorded loads (loads.json entries) the same requests: name, sizes, lengths and seed."""
    return json.dumps({k: load.get(k) for k in SAME_REQUESTS}, sort_keys=True)


def loads_json(setup_dir: Path) -> list[dict]:
    p = Path(setup_dir) / "loads.json"
    if not p.exists():
        return []
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{p} is not valid JSON ({e.msg}, line {e.lineno})", "re-record the run, or restore the file") from None


def read_load_windows(setup_dir: Path) -> list[LoadWindow]:
    """Each load's wall-clock window; empty for a run directory the GPU driver did not write."""
    return [LoadWindow(d["name"], float(d["start_s"]), float(d["start_s"]) + float(d["duration_s"]))
            for d in loads_json(setup_dir) if "start_s" in d]


def figures(req: pd.DataFrame) -> dict:
    """tok/s, TTFT p50/p95, TPOT p50 of finished requests, as vllm bench computes them."""
    ok = req[req["status"] == "ok"]
    if ok.empty:
        return {"tok_s": math.nan, "ttft_p50_ms": math.nan, "ttft_p95_ms": math.nan, "tpot_p50_ms": math.nan}
    dur = float(ok["finish_s"].max() - req["arrival_s"].min())
    ttft = (ok["first_token_s"] - ok["arrival_s"]) * 1e3
    many = ok[ok["output_tokens"] > 1]
    tpot = (many["finish_s"] - many["first_token_s"]) * 1e3 / (many["output_tokens"] - 1)
    return {"tok_s": float(ok["output_tokens"].sum() / dur) if dur > 0 else math.nan, "ttft_p50_ms": float(np.percentile(ttft, 50)),
            "ttft_p95_ms": float(np.percentile(ttft, 95)), "tpot_p50_ms": float(np.median(tpot)) if len(tpot) else math.nan}


def recorded_loads(setup_dir: Path) -> list[RecordedLoad]:
    """Every load that ran (skipped ones left out), in the order sent."""
    setup_dir = Path(setup_dir)
    path = setup_dir / "requests.parquet"
    if not path.exists():
        raise UserError(f"{setup_dir} holds no requests.parquet", "pass a setup directory written by measure/vllm/gpu_run.py")
    req = pd.read_parquet(path)
    out = []
    for d in loads_json(setup_dir):
        if d.get("skipped"):
            continue
        r = req[req["load"] == d["name"]].sort_values("arrival_s")
        if r.empty:
            continue
        f = figures(r)
        out.append(RecordedLoad(d["name"], d["kind"], d.get("concurrency"), d.get("rate_rps"), tuple(int(x) for x in r["prompt_tokens"]),
                                tuple(int(x) for x in r["max_tokens"]), tuple(float(x) for x in r["arrival_s"] - r["arrival_s"].min()),
                                refused=int((r["status"] != "ok").sum()),
                                ttft_ms=tuple(float(x) for x in (r["first_token_s"] - r["arrival_s"]) * 1e3), **f))
    return out


def step_context_tokens(setup_dir: Path, wall_times: np.ndarray) -> np.ndarray | None:
    """The summed context (prompt + tokens emitted so far) of the requests in flight at each step's
    wall time, from the requests' and chunks' records; None when the run has none. The step
    recorder's KV usage cannot give it for Gemma-4: its hybrid cache (sliding-window and full
    attention groups sharing one block pool) holds several blocks per token (a 2,394-token prompt
    shows as 6,400 tokens of blocks), and the ratio moves as windows fill."""
    setup_dir = Path(setup_dir)
    if not (setup_dir / "requests.parquet").exists() or not (setup_dir / "chunks.parquet").exists():
        return None
    req = pd.read_parquet(setup_dir / "requests.parquet")
    ch = pd.read_parquet(setup_dir / "chunks.parquet")
    ok = req[req["finish_s"].notna()]
    last = ch.groupby("request_id")["tokens"].sum()
    times = np.concatenate([ok["arrival_s"].to_numpy(float), ch["t_s"].to_numpy(float), ok["finish_s"].to_numpy(float)])
    delta = np.concatenate([ok["prompt_tokens"].to_numpy(float), ch["tokens"].to_numpy(float),
                            -(ok["prompt_tokens"].to_numpy(float) + ok["request_id"].map(last).fillna(0).to_numpy(float))])
    order = np.argsort(times, kind="stable")
    times, cum = times[order], np.cumsum(delta[order])
    idx = np.searchsorted(times, np.asarray(wall_times, float), side="right") - 1
    return np.where(idx >= 0, cum[np.clip(idx, 0, None)], 0.0)
