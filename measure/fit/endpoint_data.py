"""Endpoint runs (`costmodel measure --endpoint`, `costmodel import-bench`) -> inputs for
`costmodel fit`, provenance "endpoint". Plain dataclasses; torch-free.

API (every function takes a run directory path or a loaded `costmodel.schemas.rundir.Run`):

- `load_fit_inputs(run) -> EndpointFitInputs`: everything below, per load unit and pooled.
- `load_points(run) -> list[LoadPoint]`: per load: offered rate, throughput, TTFT/E2E percentiles,
  mean running/waiting requests and KV-cache usage. For checking the simulator at measured loads.
- `diffusion_commit_summary(run) -> DiffusionCommitSummary | None`: engine steps per canvas
  (commit step included, k + 1), denoising steps per canvas (k), committed tokens per step and per
  canvas, from the server's vllm:diffusion_* counter deltas pooled over the run's loads.
- `denoise_step_times(run, merge_ms=1.0) -> list[DenoiseStepTime]`: per load, the engine-step time
  of a diffusion deployment: the gap between two successive canvas bursts of one request is the
  k + 1 engine steps of the later canvas, so step_ms = sum(gaps) / (canvases * steps_per_canvas).
  Events closer than `merge_ms` are one burst; a burst that carries n canvases' tokens (arrived
  together) counts n canvases. Assumes canvases after a request's first have the
  run's mean k (the counters do not split k by canvas index). The step time is the one at that
  load's batch: `mean_running_requests` (vllm:num_requests_running) says how big it was.
- `decode_step_times(run, merge_ms=1.0) -> list[DecodeStepTime]`: per load, AR / MTP step time:
  a gap between output events spans tokens_in_later_event / tokens_per_step engine steps, where
  tokens_per_step is 1 (AR) or the mean acceptance length (MTP, from the counters).
  Without per-event token counts (tokens_source "pieces") each event counts as one step.
- `gap_census(run, unit, merge_ms=1.0) -> GapCensus`: why a load gave no gaps: its successful
  requests, those with two or more output events, and those with a gap of at least merge_ms.
- `spec_decode_counts(run) -> (num_drafts, [accepted at position i]) | None`: vLLM's cumulative
  counter semantics, summed over loads; `mtp_counters.json` in an endpoint run holds the same,
  in the format `costmodel fit --mtp-metrics` reads.
- `mtp_acceptance(run) -> costmodel.schemas.profile.MtpAcceptance`: conditional per-position acceptance
  (measure.fit.mtp.acceptance_from_counters), Provenance("endpoint", ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.schemas.profile import Provenance
from costmodel.schemas.rundir import Run, load_run, spec_decode_counts as run_spec_decode_counts
from measure.fit.mtp import acceptance_from_counters

PROVENANCE = "endpoint"
ENDPOINT_KINDS = ("endpoint", "bench-import")


@dataclass
class LoadPoint:
    unit: str
    source: str  # endpoint | bench-import
    qps_offered: float  # inf: all requests at once
    concurrency: int  # 0: unbounded
    completed: int
    failed: int
    duration_s: float
    request_throughput_rps: float
    output_throughput_tok_s: float
    p50_ttft_ms: float
    p95_ttft_ms: float
    p99_ttft_ms: float
    p50_e2el_ms: float
    p95_e2el_ms: float
    p99_e2el_ms: float
    mean_tpot_ms: float
    mean_itl_ms: float
    running_mean: float  # vllm:num_requests_running during the load (NaN if not scraped)
    waiting_mean: float  # queue length
    kv_cache_usage_mean: float  # fraction
    provenance: str = PROVENANCE


@dataclass
class DiffusionCommitSummary:
    steps_per_canvas: float  # engine steps per canvas, commit step included (k + 1)
    denoise_steps_per_canvas: float  # k
    committed_tokens_per_step: float  # per engine step, commit steps included
    committed_tokens_per_canvas: float
    canvases: float
    canvas_length: int
    source: str  # what the numbers come from
    provenance: str = PROVENANCE


@dataclass
class DenoiseStepTime:
    unit: str
    step_ms: float  # mean engine-step time: sum(gaps) / (n_gaps * steps_per_canvas)
    step_ms_median: float  # median gap / steps_per_canvas
    step_ms_p10: float
    step_ms_p90: float
    canvas_gap_ms_mean: float
    canvas_gap_ms_median: float
    steps_per_canvas: float
    n_gaps: int
    mean_running_requests: float  # batch context (NaN if /metrics was not scraped)
    qps_offered: float
    method: str = "canvas inter-arrival gaps / server steps per canvas"
    provenance: str = PROVENANCE


@dataclass
class DecodeStepTime:
    unit: str
    mode: str  # ar | mtp
    step_ms: float  # sum(gaps) / sum(steps spanned)
    step_ms_median: float
    step_ms_p10: float
    step_ms_p90: float
    tokens_per_step: float  # 1 (AR) or the mean acceptance length (MTP)
    n_gaps: int
    tokens_source: str  # usage | logprobs | pieces | unknown
    mean_running_requests: float
    qps_offered: float
    method: str = "output-event gaps / engine steps spanned"
    provenance: str = PROVENANCE


@dataclass
class EndpointFitInputs:
    run_path: str
    run_id: str
    kind: str
    mode: str
    model: str
    load_points: list[LoadPoint]
    diffusion: DiffusionCommitSummary | None
    denoise_step_times: list[DenoiseStepTime]
    decode_step_times: list[DecodeStepTime]
    spec_decode_counts: tuple[float, list[float]] | None
    notes: list[str] = field(default_factory=list)
    provenance: str = PROVENANCE


def _run(run: Run | str | Path) -> Run:
    r = run if isinstance(run, Run) else load_run(run)
    if r.manifest.kind not in ENDPOINT_KINDS:
        raise UserError(f"run {r.path} is a {r.manifest.kind} run, not an endpoint run", "pass a run of `costmodel measure --endpoint` or `costmodel import-bench`")
    return r


def _summary(r: Run) -> pd.DataFrame:
    if not r.has("load_summary"):
        raise UserError(f"endpoint run {r.path} has no load_summary table (no load finished)", "re-run or --resume the measurement")
    return r.table("load_summary")


def _f(row, name: str, default=math.nan) -> float:
    v = row.get(name, default) if hasattr(row, "get") else default
    try:
        v = float(v)
    except (TypeError, ValueError):
        return default
    return v


def load_points(run) -> list[LoadPoint]:
    r = _run(run)
    out = []
    for _, row in _summary(r).iterrows():
        out.append(LoadPoint(
            unit=str(row["unit"]), source=str(row["source"]), qps_offered=_f(row, "qps_offered"), concurrency=int(_f(row, "concurrency", 0) or 0),
            completed=int(row["completed"]), failed=int(row["failed"]), duration_s=float(row["duration_s"]),
            request_throughput_rps=_f(row, "request_throughput_rps"), output_throughput_tok_s=_f(row, "output_throughput_tok_s"),
            p50_ttft_ms=_f(row, "p50_ttft_ms", _f(row, "median_ttft_ms")), p95_ttft_ms=_f(row, "p95_ttft_ms"), p99_ttft_ms=_f(row, "p99_ttft_ms"),
            p50_e2el_ms=_f(row, "p50_e2el_ms", _f(row, "median_e2el_ms")), p95_e2el_ms=_f(row, "p95_e2el_ms"), p99_e2el_ms=_f(row, "p99_e2el_ms"),
            mean_tpot_ms=_f(row, "mean_tpot_ms"), mean_itl_ms=_f(row, "mean_itl_ms"),
            running_mean=_f(row, "running_mean"), waiting_mean=_f(row, "waiting_mean"), kv_cache_usage_mean=_f(row, "kv_cache_usage_mean"),
        ))
    return out


def diffusion_commit_summary(run) -> DiffusionCommitSummary | None:
    r = _run(run)
    s = _summary(r)
    if "dg_denoising_steps" not in s:
        return None
    s = s[s["dg_denoising_steps"].fillna(0) > 0]
    if s.empty:
        return None
    steps = float(s["dg_denoising_steps"].sum())
    positions = float(s["dg_canvas_positions"].fillna(0).sum())
    committed = float(s["dg_committed_tokens"].fillna(0).sum())
    canvas = int(s["dg_canvas_length"].dropna().iloc[0]) if s["dg_canvas_length"].notna().any() else 256
    canvases = positions / canvas if positions > 0 else math.nan
    if not canvases or math.isnan(canvases):
        # bench imports may carry only the ratios
        spc = float(np.average(s["dg_steps_per_canvas"].astype(float))) if s["dg_steps_per_canvas"].notna().any() else math.nan
        canvases = steps / spc if spc and not math.isnan(spc) else math.nan
    spc = steps / canvases if canvases and not math.isnan(canvases) else math.nan
    return DiffusionCommitSummary(
        steps_per_canvas=spc, denoise_steps_per_canvas=spc - 1, committed_tokens_per_step=committed / steps if steps else math.nan,
        committed_tokens_per_canvas=committed / canvases if canvases and not math.isnan(canvases) else math.nan, canvases=canvases,
        canvas_length=canvas, source=f"vllm:diffusion_* counter deltas over {len(s)} load(s) of run {r.manifest.run_id}",
    )


def _bursts(chunks: pd.DataFrame, ok_ids, merge_ms: float) -> pd.DataFrame:
    """Output events of successful requests, events closer than merge_ms merged into one burst."""
    c = chunks[chunks["request_id"].isin(set(ok_ids))].sort_values(["request_id", "chunk_index"])
    if c.empty:
        return c.assign(gap_ms=[])
    c = c.copy()
    c["tokens"] = c["tokens"].astype(float)
    gap = c.groupby("request_id", sort=False)["t_s"].diff() * 1e3
    new_burst = gap.isna() | (gap >= merge_ms)
    c["burst"] = new_burst.groupby(c["request_id"]).cumsum()
    b = c.groupby(["request_id", "burst"], sort=False).agg(t_s=("t_s", "last"), t_first=("t_s", "first"), tokens=("tokens", "sum")).reset_index()
    b["gap_ms"] = (b["t_first"] - b.groupby("request_id", sort=False)["t_s"].shift()) * 1e3
    return b


@dataclass
class GapCensus:
    """How many of a load's requests can time a gap (the reasons a load gives no step time)."""
    ok_requests: int  # status ok
    multi_event: int  # of those, with two or more output events carrying tokens
    with_gap: int  # of those, with two events at least merge_ms apart (the rest arrived together: read late)
    merge_ms: float = 1.0

    def why_no_gaps(self, what: str) -> str:
        if self.ok_requests == 0:
            return "no request succeeded"
        if self.multi_event == 0:
            return f"no request streamed two {what}"
        if self.with_gap == 0:
            return (f"{self.multi_event} of {self.ok_requests} requests streamed two or more {what} but none with a gap of "
                    f"{self.merge_ms:g} ms or more between them (the client read them together: a busy client host)")
        return (f"{self.with_gap} requests have gaps between {what}, but the load has no engine steps per gap "
                "(its server counters did not move)")


def gap_census(run, unit: str, merge_ms: float = 1.0) -> GapCensus:
    r = _run(run)
    req, ch = _unit_frames(r)
    if req.empty:
        return GapCensus(0, 0, 0)
    ok = req[(req["unit"] == unit) & (req["status"] == "ok")]["request_id"]
    c = ch[(ch["unit"] == unit) & ch["request_id"].isin(set(ok))] if not ch.empty else ch
    c = c[pd.to_numeric(c["tokens"], errors="coerce").fillna(1) > 0] if not c.empty else c  # NaN counts: an event with output
    multi = int((c.groupby("request_id").size() >= 2).sum()) if not c.empty else 0
    b = _bursts(c, ok, merge_ms) if not c.empty else c
    gapped = int(b.loc[b["gap_ms"].notna(), "request_id"].nunique()) if len(b) else 0
    return GapCensus(int(len(ok)), multi, gapped, merge_ms)


def _unit_frames(r: Run):
    req = r.table("requests") if r.has("requests") else pd.DataFrame()
    ch = r.table("chunks") if r.has("chunks") else pd.DataFrame()
    return req, ch


def denoise_step_times(run, merge_ms: float = 1.0) -> list[DenoiseStepTime]:
    r = _run(run)
    s = _summary(r)
    req, ch = _unit_frames(r)
    out: list[DenoiseStepTime] = []
    if req.empty or ch.empty or "dg_steps_per_canvas" not in s:
        return out
    for _, row in s.iterrows():
        spc = _f(row, "dg_steps_per_canvas")
        if math.isnan(spc) or spc <= 0:
            continue
        unit = row["unit"]
        ok = req[(req["unit"] == unit) & (req["status"] == "ok")]["request_id"]
        b = _bursts(ch[ch["unit"] == unit], ok, merge_ms)
        b = b[b["gap_ms"].notna()] if len(b) else b
        if b.empty:
            continue
        gaps = b["gap_ms"].to_numpy(dtype=float)
        canvas = _f(row, "dg_canvas_length", 256.0)
        toks = b["tokens"].to_numpy(dtype=float)
        # a burst carrying n canvases (events merged in transit) spans n canvases' steps
        n_canvas = np.where(np.isnan(toks) | (toks <= 0), 1.0, np.ceil(toks / canvas))
        per = gaps / (n_canvas * spc)
        out.append(DenoiseStepTime(
            unit=str(unit), step_ms=float(gaps.sum() / (n_canvas.sum() * spc)), step_ms_median=float(np.median(per)),
            step_ms_p10=float(np.percentile(per, 10)), step_ms_p90=float(np.percentile(per, 90)),
            canvas_gap_ms_mean=float(gaps.sum() / n_canvas.sum()), canvas_gap_ms_median=float(np.median(gaps / n_canvas)), steps_per_canvas=spc,
            n_gaps=int(gaps.size), mean_running_requests=_f(row, "running_mean"), qps_offered=_f(row, "qps_offered"),
        ))
    return out


def decode_step_times(run, merge_ms: float = 1.0) -> list[DecodeStepTime]:
    r = _run(run)
    serving = r.manifest.serving
    if serving.decodes_canvases:
        return []
    s = _summary(r)
    req, ch = _unit_frames(r)
    out: list[DecodeStepTime] = []
    if req.empty or ch.empty:
        return out
    for _, row in s.iterrows():
        unit = row["unit"]
        tps = _f(row, "sd_mean_acceptance_length") if serving.assistant else 1.0
        if math.isnan(tps) or tps <= 0:
            continue
        ureq = req[(req["unit"] == unit) & (req["status"] == "ok")]
        b = _bursts(ch[ch["unit"] == unit], ureq["request_id"], merge_ms)
        if b.empty:
            continue
        src = str(ureq["tokens_source"].mode().iloc[0]) if "tokens_source" in ureq and len(ureq) else "unknown"
        b = b[b["gap_ms"].notna()]
        if b.empty:
            continue
        toks = b["tokens"].to_numpy(dtype=float)
        if src == "pieces" or np.isnan(toks).any():
            steps = np.ones(len(b))  # one engine step per event: no per-event token counts
        else:
            steps = np.maximum(toks / tps, 1e-9)
        gaps = b["gap_ms"].to_numpy(dtype=float)
        per = gaps / steps
        out.append(DecodeStepTime(
            unit=str(unit), mode=serving.name, step_ms=float(gaps.sum() / steps.sum()), step_ms_median=float(np.median(per)),
            step_ms_p10=float(np.percentile(per, 10)), step_ms_p90=float(np.percentile(per, 90)), tokens_per_step=tps,
            n_gaps=int(gaps.size), tokens_source=src, mean_running_requests=_f(row, "running_mean"), qps_offered=_f(row, "qps_offered"),
        ))
    return out


def spec_decode_counts(run) -> tuple[float, list[float]] | None:
    """(num_drafts, [accepted at position i]) summed over the run's loads (vLLM counter semantics)."""
    r = _run(run)
    _summary(r)
    return run_spec_decode_counts(r)


def mtp_acceptance(run):
    """MtpAcceptance (costmodel.schemas.profile) from the run's spec-decode counters, provenance endpoint."""
    r = _run(run)
    counts = spec_decode_counts(r)
    if counts is None:
        raise UserError(f"endpoint run {r.path} has no speculative-decoding counters", "measure an MTP deployment (vLLM --speculative-config) with /metrics reachable")
    drafts, per_pos = counts
    prov = Provenance(PROVENANCE, f"endpoint run {r.manifest.run_id} ({r.manifest.model}): vLLM spec_decode counter deltas",
                      hardware=r.manifest.hardware, date=r.manifest.finished_at or r.manifest.started_at, notes=f"{drafts:.0f} drafts")
    return acceptance_from_counters(drafts, dict(enumerate(per_pos)), prov)


def load_fit_inputs(run) -> EndpointFitInputs:
    r = _run(run)
    notes = []
    canvas = r.manifest.serving.decodes_canvases
    dsum = diffusion_commit_summary(r) if canvas else None
    if canvas and dsum is None:
        notes.append("no vllm:diffusion_* counters moved: steps per canvas unknown, so no denoise step time")
    return EndpointFitInputs(
        run_path=str(r.path), run_id=r.manifest.run_id, kind=r.manifest.kind, mode=r.manifest.mode, model=r.manifest.model,
        load_points=load_points(r), diffusion=dsum,
        denoise_step_times=denoise_step_times(r) if canvas else [],
        decode_step_times=decode_step_times(r),
        spec_decode_counts=spec_decode_counts(r) if MTP_ACCEPTANCE in r.manifest.serving.parts else None, notes=notes,
    )
