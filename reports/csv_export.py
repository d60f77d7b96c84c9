"""Finance CSV: one header row, units in the column names, one column per percentile, no JSON in
any cell; and its data dictionary (every column: meaning, unit, source) as `<name>.dictionary.csv`
and `<name>.dictionary.md` beside it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from costmodel import atomic
from plan.pricing import HOURS_PER_MONTH

SIM = "simulator (simulate/results.py PointSummary)"
COST = "reports/costs.py from the simulated point and the GPU price"
PRICE = "pricing: the row's price_source column (catalog source or user override)"
PLAN = "costmodel plan / report (reports/analysis.py)"
METRIC_TEXT = {
    "ttft": "time to first token: arrival -> first output token emitted (diffusion: first committed canvas)",
    "e2e": "end-to-end latency: arrival -> last output token emitted",
    "tpot": "time per output token after the first: (e2e - ttft) / (output tokens - 1)",
    "queue": "queueing delay: arrival -> the engine first schedules any of the request's work",
}
STAT_TEXT = {"p50": "50th percentile (median)", "p90": "90th percentile", "p95": "95th percentile", "p99": "99th percentile", "mean": "mean"}


@dataclass(frozen=True)
class ColumnDoc:
    column: str
    meaning: str
    unit: str
    source: str


FIXED: dict[str, tuple[str, str, str]] = {
    "hardware": ("GPU type (catalog id)", "-", "costmodel/data/hardware.json"),
    "mode": ("serving mode: diffusion = DiffusionGemma-26B-A4B block diffusion; ar = Gemma-4-26B-A4B autoregressive; mtp = Gemma-4 with multi-token prediction", "-", SIM),
    "qps": ("offered load: Poisson request arrivals per second across all replicas", "requests/s", "plan --qps / simulate --qps"),
    "meets_slo": ("true when the point is stable and every SLO bound holds", "boolean", PLAN),
    "replicas": ("model replicas serving the load (for a plan: the fewest that meet the SLO)", "count", PLAN),
    "gpus": ("GPUs in use = replicas x gpus_per_replica", "count", COST),
    "gpus_per_replica": ("GPUs one model replica occupies (one per replica in every shipped configuration)", "count", COST),
    "cost_usd_per_month": (f"GPU cost of the configuration for a month of {HOURS_PER_MONTH:g} hours (8,760 h / 12) = cost_usd_per_hour x {HOURS_PER_MONTH:g}", "USD/month", COST),
    "cost_usd_per_hour": ("GPU cost of the configuration per hour = gpus x (rate_usd_per_gpu_hour + electricity_usd_per_gpu_hour)", "USD/hour", COST),
    "cost_usd_per_mtok_output": ("cost per million output (generated) tokens = cost_usd_per_hour / (output_tokens_per_s x 3600) x 1e6; empty when nothing was served", "USD per 1M output tokens", COST),
    "cost_usd_per_mtok_total": ("cost per million total tokens (prompt + output) = cost_usd_per_hour / (total_tokens_per_s x 3600) x 1e6", "USD per 1M tokens", COST),
    "cost_usd_per_1k_requests": ("cost per thousand completed requests = cost_usd_per_hour / (throughput_rps x 3600) x 1000", "USD per 1k requests", COST),
    "energy_kwh_per_mtok_output": ("facility energy per million output tokens = facility_power_kw / (output_tokens_per_s x 3600) x 1e6 (includes PUE)", "kWh per 1M output tokens", COST),
    "facility_power_kw": ("facility power of the configuration = gpus x power_w_per_gpu x PUE / 1000", "kW", COST),
    "power_w_per_gpu": ("GPU power at this point's utilisation = active power (board power, or measured telemetry) x gpu_busy_frac; idle draw not included", "W", "the row's power_source column"),
    "pricing_basis": ("cloud = hourly rental; onprem = purchase price amortised over its life plus electricity", "-", PRICE),
    "rate_usd_per_gpu_hour": ("per-GPU hourly rate: cloud rental price, or on-prem purchase price / (amortisation years x 8,760 h)", "USD per GPU-hour", PRICE),
    "electricity_usd_per_gpu_hour": ("on-prem electricity per GPU-hour = power_w_per_gpu / 1000 x PUE x USD/kWh (0 for cloud: the rental includes power)", "USD per GPU-hour", "--electricity-usd-per-kwh, --pue (defaults: aiinframap.com TCO tool, mid-2026)"),
    "price_source": ("where the GPU rate comes from (catalog citation or user override)", "text", "costmodel/data/hardware.json sources / command line"),
    "power_source": ("where the GPU's active power comes from (catalog board power or measured telemetry)", "text", "costmodel/data/hardware.json sources / --telemetry run"),
    "cheapest_at_qps": ("true for the cheapest SLO-meeting (hardware, mode) at this QPS", "boolean", PLAN),
    "slo": ("the service-level objective checked (bounds on latency percentiles); 'stable' when only steady state is required", "text", "plan --slo / report --slo"),
    "slo_failures": ("why the point (or, for a plan row, the largest replica count tried) misses the SLO; empty when it meets it", "text", PLAN),
    "evaluations": ("simulated points the replica search evaluated for this (hardware, mode, QPS)", "count", "reports/search.py"),
    "profile_id": ("the profile (pass costs, commit statistics) the simulator used", "-", SIM),
    "requests_arrived": ("requests that arrived during the simulated window", "count", SIM),
    "requests_finished": ("requests that completed", "count", SIM),
    "requests_unfinished": ("requests still queued or running when the simulation ended", "count", SIM),
    "stable": ("false when the queue grew without bound: latency numbers are then not steady-state", "boolean", SIM),
    "stability_reason": ("why the simulator judged the point stable or unstable", "text", SIM),
    "duration_s": ("arrival window of the point: requests arrive during this many simulated seconds", "s", SIM),
    "throughput_rps": ("requests finished inside the steady window (warm-up end to end of arrivals) per second; on an unstable point the saturated service rate", "requests/s", SIM),
    "output_tokens_per_s": ("output (generated) tokens of the requests finished in the steady window per second, all replicas", "tokens/s", SIM),
    "total_tokens_per_s": ("prompt + output tokens of the requests finished in the steady window per second, all replicas", "tokens/s", SIM),
    "output_tokens": ("output tokens of completed requests", "tokens", SIM),
    "prompt_tokens": ("prompt tokens of completed requests", "tokens", SIM),
    "gpu_busy_frac": ("fraction of the arrival window the replicas spent running engine steps (mean over replicas)", "fraction 0-1", SIM),
    "mean_batch_seqs": ("mean sequences per forward pass", "sequences", SIM),
    "mean_batch_tokens": ("mean query tokens per forward pass", "tokens", SIM),
    "seed": ("random seed of the simulated workload", "-", SIM),
    "mean_in_system": ("time-average number of requests arrived and not finished over the arrival window (Little's L)", "requests", SIM),
    "backlog_growth": ("fitted growth of requests in the system over the steady window (the stability test: unstable above the largest of 10 requests, 3% of the arrivals in the window and half the mean number in the system)", "requests", SIM),
    "warmup_s": ("initial span of the arrival window left out of percentiles and throughput", "s", SIM),
    "simulated_s": ("simulated clock at the end of the run (arrivals plus drain, or the abort time)", "s", SIM),
    "engine_steps": ("engine steps (forward passes) simulated, all replicas", "count", SIM),
    "preemptions": ("requests preempted (KV cache exhausted) and recomputed, all replicas", "count", SIM),
    "kv_capacity_tokens": ("KV-cache capacity of one replica", "tokens", SIM),
    "max_num_seqs": ("engine limit: sequences per step", "sequences", SIM),
    "max_num_batched_tokens": ("engine limit: query tokens per step", "tokens", SIM),
    "router": ("how requests are routed to replicas", "text", SIM),
    "workload": ("arrival process and prompt/output length distributions simulated", "text", SIM),
    "provenance": ("provenance kinds of the profile parts this mode used (measured / projected / published / roofline / endpoint)", "text", SIM),
}
_PCT = re.compile(r"^(ttft|e2e|tpot|queue)_ms_(p\d+|mean)$")
_BATCH = re.compile(r"^batch_(.+)_seqs$")
_UNIT_SUFFIX = (("_ms", "ms"), ("_s", "s"), ("_frac", "fraction 0-1"), ("_rps", "requests/s"), ("_w", "W"), ("_kw", "kW"),
                ("_usd", "USD"), ("_tokens", "tokens"), ("_gb", "GB"))


def describe(column: str) -> ColumnDoc:
    """Meaning, unit and source of a column (known names, then patterns, then the unit suffix)."""
    if column in FIXED:
        return ColumnDoc(column, *FIXED[column])
    m = _PCT.match(column)
    if m:
        metric, stat = m.groups()
        return ColumnDoc(column, f"{STAT_TEXT.get(stat, stat)} of {METRIC_TEXT[metric]}, over completed requests", "ms", SIM)
    m = _BATCH.match(column)
    if m:
        return ColumnDoc(column, f"mean sequences per forward pass in {m.group(1)} passes (batch composition)", "sequences", SIM)
    unit = next((u for suf, u in _UNIT_SUFFIX if column.endswith(suf)), "-")
    return ColumnDoc(column, f"simulator field {column} (named by the simulator; not described further by this costmodel version)", unit, SIM)


def dictionary(columns) -> pd.DataFrame:
    return pd.DataFrame([describe(c).__dict__ for c in columns], columns=["column", "meaning", "unit", "source"])


def _cell(v):
    if isinstance(v, (list, tuple)):
        return "; ".join(str(x) for x in v)
    return v


def finance_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Flatten what is left nested (dict cells -> one column per key; lists -> "a; b"), round floats
    to 6 decimals, keep one header row."""
    out = {}
    for c in df.columns:
        col = df[c]
        if col.dtype == object and col.map(lambda v: isinstance(v, dict)).any():
            keys = sorted({k for v in col if isinstance(v, dict) for k in v})
            for k in keys:
                out[f"{c}_{k}"] = col.map(lambda v, k=k: v.get(k) if isinstance(v, dict) else None)
            continue
        if col.dtype == object:
            col = col.map(_cell)
        elif pd.api.types.is_float_dtype(col):
            col = col.round(6)
        out[c] = col
    return pd.DataFrame(out, index=df.index)


def dictionary_paths(csv_path: str | Path) -> tuple[Path, Path]:
    p = Path(csv_path)
    stem = p.name[:-4] if p.name.lower().endswith(".csv") else p.name
    return p.with_name(f"{stem}.dictionary.csv"), p.with_name(f"{stem}.dictionary.md")


def dictionary_markdown(d: pd.DataFrame, title: str) -> str:
    lines = [f"# Data dictionary: {title}", "", "One row per column of the CSV: meaning, unit and source.", "",
             "| column | meaning | unit | source |", "|---|---|---|---|"]
    for r in d.to_dict("records"):
        lines.append("| " + " | ".join(str(r[k]).replace("|", "/") for k in ("column", "meaning", "unit", "source")) + " |")
    return "\n".join(lines) + "\n"


def write_finance_csv(df: pd.DataFrame, path: str | Path) -> list[Path]:
    """Write the CSV and its dictionary (.dictionary.csv and .dictionary.md); returns the paths."""
    flat = finance_frame(df)
    path = Path(path)
    atomic.write_csv(path, flat)
    d = dictionary(flat.columns)
    dcsv, dmd = dictionary_paths(path)
    atomic.write_csv(dcsv, d)
    atomic.write_text(dmd, dictionary_markdown(d, path.name))
    return [path, dcsv, dmd]

