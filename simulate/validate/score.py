"""Scoring the simulator against a measured load run: align requests, compare aggregates.

Per rate: request throughput (finished requests / (last finish - first arrival)), TTFT and E2E at
p50/p95/p99. relative error = (predicted - measured) / measured. The summary MAPE per metric is the
mean |relative error| over the rates below saturation (rates flagged `saturated` are reported but
left out of the summary, as the targets are stated below saturation; see `is_saturated`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from costmodel.errors import UserError

METRICS = ("throughput_rps", "ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99", "e2e_ms_p50", "e2e_ms_p95", "e2e_ms_p99")
TARGETS_PCT = {"throughput_rps": 3.0, "e2e_ms_p50": 5.0, "e2e_ms_p99": 8.0}


@dataclass
class RateScore:
    mode: str
    rate_rps: float
    metric: str
    measured: float
    predicted: float
    rel_error_pct: float
    saturated: bool


def aggregates(df: pd.DataFrame) -> dict[str, float]:
    """Throughput and latency percentiles of one set of request records (seconds columns)."""
    need = {"arrival_s", "first_token_s", "finish_s"}
    if not need <= set(df.columns):
        raise UserError(f"request records lack {sorted(need - set(df.columns))}", "pass a load run's requests table")
    done = df.dropna(subset=["finish_s"])
    if done.empty:
        raise UserError("no finished requests to score", "run the load longer or at a lower rate")
    span = done.finish_s.max() - df.arrival_s.min()
    ttft = (done.first_token_s - done.arrival_s) * 1e3
    e2e = (done.finish_s - done.arrival_s) * 1e3
    out = {"throughput_rps": len(done) / span if span > 0 else float("nan")}
    for q in (50, 95, 99):
        out[f"ttft_ms_p{q}"] = float(np.percentile(ttft, q))
        out[f"e2e_ms_p{q}"] = float(np.percentile(e2e, q))
    return out


def align(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """Join measured and simulated requests on request_id; both must hold the same requests."""
    ids_m, ids_p = set(measured.request_id), set(predicted.request_id)
    if ids_m != ids_p:
        raise UserError(f"measured and simulated runs hold different requests ({len(ids_m - ids_p)} only measured, {len(ids_p - ids_m)} only simulated)",
                        "simulate the same workload as the load run")
    cols = ["request_id", "arrival_s", "first_token_s", "finish_s"]
    j = measured[cols].merge(predicted[cols], on="request_id", suffixes=("_measured", "_predicted"))
    if not np.allclose(j.arrival_s_measured, j.arrival_s_predicted, atol=1e-6):
        raise UserError("measured and simulated arrivals differ", "simulate with the load run's own arrival times")
    j["e2e_ms_measured"] = (j.finish_s_measured - j.arrival_s_measured) * 1e3
    j["e2e_ms_predicted"] = (j.finish_s_predicted - j.arrival_s_predicted) * 1e3
    j["e2e_rel_error_pct"] = 100 * (j.e2e_ms_predicted - j.e2e_ms_measured) / j.e2e_ms_measured
    return j


def score_rate(mode: str, rate: float, measured: pd.DataFrame, predicted: pd.DataFrame, saturated: bool) -> list[RateScore]:
    align(measured, predicted)
    am, ap = aggregates(measured), aggregates(predicted)
    return [RateScore(mode, rate, k, am[k], ap[k], 100 * (ap[k] - am[k]) / am[k] if am[k] else float("nan"), saturated) for k in METRICS]


def score_table(scores: list[RateScore]) -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in scores])


def summary_mape(table: pd.DataFrame) -> pd.DataFrame:
    """Mean |relative error| per (mode, metric) over unsaturated rates, with the issue's targets."""
    below = table[~table.saturated]
    g = below.assign(abs_err=below.rel_error_pct.abs()).groupby(["mode", "metric"], sort=False).abs_err.mean().rename("mape_pct").reset_index()
    g["target_pct"] = [TARGETS_PCT.get(str(m), float("nan")) for m in g.metric]
    g["meets_target"] = [bool(e <= t) if t == t else None for e, t in zip(g.mape_pct, g.target_pct)]
    return g


def idle_fraction(measured: pd.DataFrame) -> float:
    """Share of the arrival window (first to last arrival) in which the server ran no batch.
    Batches are the requests sharing a start time; one runs from its start to its last finish."""
    q = measured.dropna(subset=["finish_s"])
    t0, t1 = measured.arrival_s.min(), measured.arrival_s.max()
    if t1 <= t0:
        return 0.0
    busy = q.groupby("start_s").finish_s.max().reset_index().sort_values("start_s")
    covered, end = 0.0, t0
    for s0, s1 in zip(busy.start_s, busy.finish_s):
        s0, s1 = max(s0, end), min(s1, t1)
        if s1 > s0:
            covered += s1 - s0
            end = s1
    return 1.0 - covered / (t1 - t0)


def is_saturated(measured: pd.DataFrame, min_idle: float = 0.05) -> bool:
    """A load is saturated when the server was almost never idle while requests kept arriving
    (idle < 5% of the arrival window): the queue then only grows, and its latencies depend on how
    long the load ran, not on a steady state. Below that the server caught up between bursts."""
    return idle_fraction(measured) < min_idle
