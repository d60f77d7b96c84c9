"""Hand-built simulator records for the reports/plan tests: PointSummary rows and a toy queueing
evaluator whose answer is known in closed form."""

from __future__ import annotations

import math

from costmodel.schemas.results import PointSummary


def point(mode="diffusion", hardware="h200", qps=5.0, replicas=1, *, ttft_p95=200.0, e2e_p95=2000.0, stable=True, busy=0.5,
          throughput_rps=None, out_tok_s=None, total_tok_s=None, profile_id=None) -> dict:
    """A flat PointSummary row; throughput defaults to the offered load with 200 output / 600 prompt tokens per request."""
    thr = qps if throughput_rps is None else throughput_rps
    out = thr * 200 if out_tok_s is None else out_tok_s
    tot = thr * 800 if total_tok_s is None else total_tok_s
    pct = lambda v: {"p50": v / 2, "p90": v * 0.9, "p95": v, "p99": v * 1.2, "mean": v / 1.8}
    return PointSummary(
        mode=mode, hardware=hardware, profile_id=profile_id or f"{hardware}-test", qps=qps, replicas=replicas,
        requests_arrived=int(qps * 60), requests_finished=int(thr * 60), requests_unfinished=int((qps - thr) * 60),
        stable=stable, stability_reason="queue bounded" if stable else "queue grew", duration_s=60.0,
        throughput_rps=thr, output_tokens_per_s=out, total_tokens_per_s=tot, output_tokens=int(out * 60), prompt_tokens=int((tot - out) * 60),
        gpu_busy_frac=busy, mean_batch_seqs=4.0, mean_batch_tokens=100.0,
        ttft_ms=pct(ttft_p95), e2e_ms=pct(e2e_p95), tpot_ms=pct(10.0), queue_ms=pct(5.0),
        batch_composition={"denoise_step": 3.0} if mode == "diffusion" else {"decode_step": 3.0}, seed=0, provenance="roofline",
    ).flat()


# per-replica capacity (requests/s) and unloaded p95 latency (ttft ms, e2e ms) of the toy evaluator
TOY = {
    ("h200", "diffusion"): (4.0, 300.0, 1500.0),
    ("h200", "ar"): (10.0, 150.0, 3000.0),
    ("h200", "mtp"): (8.0, 150.0, 2200.0),
    ("rtx-5090", "diffusion"): (1.5, 500.0, 2500.0),
    ("rtx-5090", "ar"): (3.0, 300.0, 4200.0),
    ("rtx-5090", "mtp"): (2.5, 300.0, 3500.0),
}


def toy_point(hardware: str, mode: str, qps: float, replicas: int) -> dict:
    """M/M/1-like: latency = unloaded / (1 - rho) with rho = qps / (replicas * capacity); unstable at rho >= 0.95."""
    cap, ttft0, e2e0 = TOY[(hardware, mode)]
    rho = qps / (replicas * cap)
    stable = rho < 0.95
    f = 1 / (1 - rho) if stable else math.inf
    thr = min(qps, replicas * cap * 0.95)
    return point(mode, hardware, qps, replicas, ttft_p95=ttft0 * f if stable else 1e6, e2e_p95=e2e0 * f if stable else 1e6,
                 stable=stable, busy=min(rho, 1.0), throughput_rps=thr)


def toy_min_replicas(hardware, mode, qps, ttft_ms, e2e_ms, max_r=500):
    for r in range(1, max_r + 1):
        p = toy_point(hardware, mode, qps, r)
        if p["stable"] and p["ttft_ms_p95"] <= ttft_ms and p["e2e_ms_p95"] <= e2e_ms:
            return r
    return None


def simulate_dir(d, rows: list[dict]):
    """`rows` as a `costmodel simulate -o` directory's summary.csv, published as its output set (the
    reports read a simulate directory through its manifest, costmodel/outputset.py)."""
    import pandas as pd

    from costmodel import atomic, outputset

    with outputset.publishing(d, "simulate") as stage:
        written = [atomic.write_csv(stage / "summary.csv", pd.DataFrame(rows))]
    outputset.published(written, stage, d)
    return d
