"""Endpoint runs (`costmodel measure --endpoint`, `costmodel import-bench`) -> what `costmodel fit`
takes from them, all with provenance "endpoint". The step times come from
`measure.fit.endpoint_data`; this module maps them onto pass shapes.

Mapping (one observation per load of the run; vLLM's engine step mixes the requests running at
the time, so an observation is the MEAN engine step at that load's mean batch):

- diffusion -> `denoise_step`: ms = fitdata.denoise_step_times step_ms (sum of canvas gaps /
  (canvases x server engine steps per canvas, k + 1)); Segment("denoise_step", seqs =
  round(mean vllm:num_requests_running), tokens = the canvas length (dg_canvas_length),
  context = mean over the timed canvases (every canvas after a request's first, the ones the gaps
  measure) of prompt_tokens + canvases already committed x canvas length). The commit step is one
  of the k + 1 engine steps and the gaps cannot separate it: every engine step is priced as a
  denoise step, so a simulator that adds `encoder_commit` per canvas on top of k denoise steps
  is off by (commit pass - mean engine step) per canvas, not by a whole pass.
- ar -> `decode_step`: ms = fitdata.decode_step_times step_ms (event gaps / engine steps spanned);
  Segment("decode_step", seqs = round(mean running), tokens = 1, context = token-weighted mean
  position, prompt_tokens + output_tokens / 2 over the load's successful requests).
- mtp -> nothing for pass costs: an MTP engine step is k assistant draft passes plus one target
  verify pass, and the output-event gaps time only their sum; no split is invented, so neither
  `draft_step` nor `verify_step` is fitted from it (time them on a GPU). Its spec-decode counters
  give the MTP acceptance when `--mtp-metrics` is not given.
- batch: mean vllm:num_requests_running over the load (includes ramp-up and drain); without
  /metrics, the mean number of requests between first token and finish (Little's law over the
  load's first-token..finish window), said so in the fit's messages.
- commit statistics: diffusion endpoint runs whose commit_source is "model" (a served model whose
  vllm:diffusion_* counters moved: its own steps per canvas). Per regime, from loads whose
  requests are all of that regime (the counters cannot be split between regimes): steps per canvas
  k = server steps per canvas - 1 (the commit step), as a distribution over the loads' means
  weighted by canvases (the counters give sums, not per-canvas values); tokens per call =
  committed tokens / denoising steps; content length = the successful requests' output tokens
  (truncated at max_tokens); re-noise count and commit entropy from the published prior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Iterator

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.roofline import get_pass_kind
from costmodel.prior import CITATION, COMMIT_ENTROPY_NATS, REGIMES, RENOISE_PER_GENERATION
from costmodel.schemas.profile import CommitStats, Distribution, Provenance
from costmodel.schemas.rundir import Run
from measure.fit import endpoint_data as fitdata
from measure.fit.mtp import acceptance_from_counters

ENDPOINT_KINDS = ("endpoint", "bench-import")
ORIGINS = ("gpu", "endpoint")
# how an endpoint load becomes one observation of a decode-phase pass, by its query tokens (PassKind.query_tokens)
MAPPING_NOTE = {
    "canvas": ("mean vLLM engine step (canvas gaps / server steps per canvas, commit step included) at the load's mean running "
                     "requests, canvas-length tokens, mean context of the timed canvases; client wall clock"),
    "one": "mean vLLM engine step (event gaps / steps spanned) at the load's mean running requests, 1 token, mean position; client wall clock",
}


def mapping_note(kind: str) -> str:
    """How endpoint loads became observations of pass kind `kind`."""
    return MAPPING_NOTE[get_pass_kind(kind).query_tokens]


def is_endpoint(run: Run) -> bool:
    return run.manifest.kind in ENDPOINT_KINDS


def origin(run: Run) -> str:
    return "endpoint" if is_endpoint(run) else "gpu"


def _unit_requests(run: Run, unit: str) -> pd.DataFrame:
    req = run.table("requests") if run.has("requests") else pd.DataFrame()
    if req.empty:
        return req
    return req[(req["unit"] == unit) & (req["status"] == "ok")]


def _batch(run: Run, unit: str, running_mean: float, msgs: list[str]) -> float | None:
    if running_mean is not None and math.isfinite(running_mean) and running_mean > 0:
        return running_mean
    req = _unit_requests(run, unit)
    if req.empty or "first_token_s" not in req or "finish_s" not in req:
        return None
    a, b = pd.to_numeric(req["first_token_s"], errors="coerce"), pd.to_numeric(req["finish_s"], errors="coerce")
    ok = a.notna() & b.notna() & (b > a)
    if not ok.any():
        return None
    window = float(b[ok].max() - a[ok].min())
    if window <= 0:
        return None
    est = float((b[ok] - a[ok]).sum() / window)
    msgs.append(f"endpoint run {run.manifest.run_id} load {unit}: no vllm:num_requests_running; batch {est:.2f} estimated from the "
                "requests' first-token..finish spans (Little's law)")
    return est


def _num(s) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)


def diffusion_context(run: Run, unit: str, canvas: int) -> float:
    """Mean cached context of the canvases the gaps time (every canvas after a request's first)."""
    req = _unit_requests(run, unit)
    if req.empty:
        return 0.0
    p = np.nan_to_num(_num(req["prompt_tokens"]), nan=0.0)
    n = np.maximum(np.ceil(np.nan_to_num(_num(req["output_tokens"]), nan=0.0) / canvas), 1.0)
    timed = n - 1.0  # canvases j = 1..n-1, context p + j * canvas
    total = float(timed.sum())
    if total <= 0:
        return float(p.mean())
    ctx = timed * p + canvas * timed * n / 2.0  # sum_{j=1}^{n-1} (p + j L)
    return float(ctx.sum() / total)


def decode_context(run: Run, unit: str) -> float:
    """Token-weighted mean position of the decode steps: prompt + output / 2 per request."""
    req = _unit_requests(run, unit)
    if req.empty:
        return 0.0
    p = np.nan_to_num(_num(req["prompt_tokens"]), nan=0.0)
    o = np.nan_to_num(_num(req["output_tokens"]), nan=0.0)
    if o.sum() <= 0:
        return float(p.mean())
    return float(((p + o / 2.0) * o).sum() / o.sum())


def _unusable(batch: float | None, step_ms: float) -> str | None:
    """Why a load with timed gaps still gives no observation (None: it is usable)."""
    if batch is None:
        return "no batch size (vllm:num_requests_running never scraped above 0, and no request's first-token..finish span)"
    if not math.isfinite(step_ms) or step_ms <= 0:
        return f"step time {step_ms} ms is not positive"
    return None


def _why_empty(run: Run, skipped: dict[str, str] | None = None) -> str:
    """Why an endpoint run gave no observation: the run-wide cause, else each load's."""
    if not run.has("load_summary"):
        return "it has no load_summary table (no load finished)"
    s = run.table("load_summary")
    if pd.to_numeric(s["completed"], errors="coerce").fillna(0).sum() <= 0:
        return "no request succeeded in any load"
    diffusion = run.manifest.serving.decodes_canvases
    if diffusion and ("dg_steps_per_canvas" not in s or not (pd.to_numeric(s["dg_steps_per_canvas"], errors="coerce") > 0).any()):
        return "no vllm:diffusion_* counters moved (steps per canvas unknown: was /metrics reachable?)"
    what = "canvases" if diffusion else "output events"
    skipped = skipped or {}
    reasons = [f"load {u}: " + (skipped.get(str(u)) or fitdata.gap_census(run, str(u)).why_no_gaps(what)) for u in s["unit"]]
    return "; ".join(reasons)


def _step_loads(run: Run, summ: pd.DataFrame, canvases: bool) -> Iterator[tuple]:
    """(step time, tokens per sequence, context tokens (a call: made only for a usable load), note)
    per load of an endpoint run: a canvas step denoises each running canvas whole, a token step
    decodes one token per sequence; both then become pass observations the same way."""
    if canvases:
        for st in fitdata.denoise_step_times(run):
            row = summ.loc[st.unit]
            canvas = int(row["dg_canvas_length"]) if pd.notna(row.get("dg_canvas_length")) else 256
            yield st, canvas, partial(diffusion_context, run, st.unit, canvas), ""
    else:
        for dt in fitdata.decode_step_times(run):
            note = "no per-event token counts; each output event counted as one step" if dt.tokens_source == "pieces" else ""
            yield dt, 1, partial(decode_context, run, dt.unit), note


def endpoint_frame(runs: list[Run], msgs: list[str]) -> pd.DataFrame:
    """Pass observations from endpoint runs: pass_kind, seqs, tokens_per_seq, context_tokens, ms,
    run_id, row_engine, unit. UserError for a diffusion/AR endpoint run with no usable load."""
    rows = []
    for run in runs:
        m = run.manifest
        if not run.has("load_summary"):
            raise UserError(f"endpoint run {run.path} has no usable loads: {_why_empty(run)}", "re-run or --resume the measurement")
        summ = run.table("load_summary").set_index("unit", drop=False)
        engine = str(m.engine.get("name", "endpoint"))
        serving = m.serving
        if serving.side_kinds:  # its steps run side passes beside the joint forward: the gaps time their sum
            dts = fitdata.decode_step_times(run)
            said = "; ".join(f"{d.unit}: {d.step_ms:.3g} ms per step at {d.mean_running_requests:.3g} running" for d in dts)
            msgs.append(f"endpoint run {m.run_id} (mtp): not used for pass costs - an MTP engine step is k draft passes + 1 verify pass and "
                        f"the event gaps time only their sum ({said or 'no step times'}); time draft_step/verify_step on a GPU run")
            continue
        got, skipped = 0, {}
        kind = serving.group_kinds[0]  # a step's decode-phase pass: denoising canvases, or decoding tokens
        for st, tokens_per_seq, context, note in _step_loads(run, summ, serving.decodes_canvases):
            b = _batch(run, st.unit, st.mean_running_requests, msgs)
            why = _unusable(b, st.step_ms)
            if why:
                skipped[st.unit] = why
                msgs.append(f"endpoint run {m.run_id} load {st.unit}: {why}; skipped")
                continue
            if note:
                msgs.append(f"endpoint run {m.run_id} load {st.unit}: {note}")
            rows.append({"pass_kind": kind, "seqs": max(1, int(round(b))), "tokens_per_seq": tokens_per_seq,
                         "context_tokens": int(round(context())), "ms": float(st.step_ms),
                         "run_id": m.run_id, "row_engine": engine, "unit": st.unit, "n_gaps": st.n_gaps, "batch": b})
            got += 1
        if not got:
            raise UserError(f"endpoint run {run.path} has no usable loads: {_why_empty(run, skipped)}",
                            "measure with /metrics reachable and requests long enough to stream several canvases/tokens")
        msgs.append(f"endpoint run {m.run_id}: {got} load(s) -> {kind} observations ("
                    + ", ".join(f"{r['unit']}: {r['ms']:.3g} ms at seqs={r['seqs']}, context={r['context_tokens']}"
                                for r in rows if r["run_id"] == m.run_id) + ")")
    cols = ["pass_kind", "seqs", "tokens_per_seq", "context_tokens", "ms", "run_id", "row_engine", "unit", "n_gaps", "batch"]
    return pd.DataFrame(rows, columns=cols)


def resolve_mixing(gpu: pd.DataFrame, ep: pd.DataFrame, prefer: str | None, msgs: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The one rule: a pass kind is fitted from runs of ONE origin. Where GPU and endpoint runs both
    observe a kind, refuse unless `prefer` names the origin to keep (the other's rows for that kind
    are dropped and said so)."""
    if prefer is not None and prefer not in ORIGINS:
        raise UserError(f"--prefer {prefer!r} is unknown", "use --prefer gpu or --prefer endpoint")
    both = sorted(set(gpu.get("pass_kind", [])) & set(ep.get("pass_kind", [])))
    for kind in both:
        g_ids = sorted(gpu.loc[gpu.pass_kind == kind, "run_id"].unique())
        e_ids = sorted(ep.loc[ep.pass_kind == kind, "run_id"].unique())
        if prefer is None:
            raise UserError(f"pass kind {kind} is observed by GPU runs ({', '.join(g_ids)}) and endpoint runs ({', '.join(e_ids)}), "
                            "which are not pooled into one model", "pass --prefer gpu or --prefer endpoint to fit it from one origin")
        if prefer == "gpu":
            ep = ep[ep.pass_kind != kind]
            msgs.append(f"{kind}: fitted from GPU runs (--prefer gpu); endpoint runs {', '.join(e_ids)} not used for it")
        else:
            gpu = gpu[gpu.pass_kind != kind]
            msgs.append(f"{kind}: fitted from endpoint runs (--prefer endpoint); GPU runs {', '.join(g_ids)} not used for it")
    if prefer is not None and not both:
        msgs.append(f"--prefer {prefer} not needed: no pass kind is observed by both GPU and endpoint runs")
    return gpu, ep


def endpoint_mtp_acceptance(runs: list[Run]):
    """(MtpAcceptance, message) pooled over the endpoint MTP runs' spec-decode counters, or None."""
    drafts, per_pos, used = 0.0, [], []
    for r in runs:
        if MTP_ACCEPTANCE not in r.manifest.serving.parts:
            continue
        c = fitdata.spec_decode_counts(r)
        if c is None:
            continue
        d, p = c
        if per_pos and len(p) != len(per_pos):
            raise UserError(f"endpoint MTP runs draft different numbers of tokens ({len(per_pos)} vs {len(p)} in {r.manifest.run_id})",
                            "fit one speculative config at a time, or pass --mtp-metrics")
        per_pos = [a + b for a, b in zip(per_pos, p)] if per_pos else list(p)
        drafts += d
        used.append(r)
    if not used:
        return None
    ids = ", ".join(r.manifest.run_id for r in used)
    prov = Provenance("endpoint", f"endpoint runs {ids}: vLLM spec_decode counter deltas", hardware=None,
                      date=min(r.manifest.started_at for r in used), notes=f"{drafts:.0f} drafts; conditional acceptance per position")
    a = acceptance_from_counters(drafts, dict(enumerate(per_pos)), prov)
    return a, f"MTP acceptance from {prov.source}: k={a.num_speculative_tokens}, mean acceptance length {a.mean_acceptance_length:.2f}"


def require_endpoint_commits(run: Run) -> None:
    m = run.manifest
    if not m.serving.decodes_canvases:
        raise UserError(f"run {run.path} is a {m.mode} run, so it has no diffusion commits", "pass diffusion runs to --commit-runs")
    if m.commit_source != "model":
        raise UserError(f"endpoint run {run.path} cannot give the model's commit statistics: its commit_source is {m.commit_source!r} "
                        "(no vllm:diffusion_* counters moved)", "pass an endpoint run of a diffusion deployment with /metrics reachable")


@dataclass
class RegimeCounters:
    """One regime's diffusion counters summed over its single-regime loads."""

    k: list[float] = field(default_factory=list)  # denoising steps per canvas, one per load
    canvases: list[float] = field(default_factory=list)  # the loads' canvases (weights of k)
    committed: float = 0.0
    denoise: float = 0.0  # denoising engine steps (commit steps excluded)
    content: list[float] = field(default_factory=list)  # successful requests' output tokens
    runs: set[str] = field(default_factory=set)


def _counter(row: pd.Series, name: str) -> float:
    return float(pd.to_numeric(pd.Series([row.get(name)]), errors="coerce").iloc[0])


def _add_commit_loads(run: Run, per: dict[str, RegimeCounters], msgs: list[str]) -> None:
    """Add the run's single-regime loads whose counters moved to `per` (regime -> counters); say why others are not used."""
    s = run.table("load_summary")
    req = run.table("requests") if run.has("requests") else pd.DataFrame()
    for _, row in s.iterrows():
        steps, canv, committed = _counter(row, "dg_denoising_steps"), _counter(row, "dg_canvases"), _counter(row, "dg_committed_tokens")
        if not (steps > 0 and canv > 0):
            continue
        unit = row["unit"]
        k = steps / canv - 1.0
        if k < 1:
            msgs.append(f"endpoint run {run.manifest.run_id} load {unit}: {steps / canv:.2f} engine steps per canvas (< 1 denoising step "
                        "besides the commit); not used for commit statistics")
            continue
        ureq = req[req["unit"] == unit] if not req.empty else req
        regimes = sorted({str(x) for x in ureq["regime"].dropna()}) if "regime" in ureq else []
        if len(regimes) != 1:
            msgs.append(f"endpoint run {run.manifest.run_id} load {unit}: "
                        + ("requests of regimes " + ", ".join(regimes) if regimes else "no regime recorded per request")
                        + "; the counters cannot be split by regime, so not used for commit statistics")
            continue
        ok = ureq[ureq["status"] == "ok"]
        d = per.setdefault(regimes[0].upper(), RegimeCounters())
        d.k.append(k)
        d.canvases.append(canv)
        d.committed += committed if math.isfinite(committed) else 0.0
        d.denoise += steps - canv
        d.content += [float(x) for x in _num(ok["output_tokens"]) if math.isfinite(x) and x > 0]
        d.runs.add(run.manifest.run_id)


def _regime_commit_stats(regime: str, d: RegimeCounters, runs: list[Run]) -> CommitStats:
    w = np.asarray(d.canvases, float)
    vals, inv = np.unique(np.round(np.asarray(d.k, float), 6), return_inverse=True)
    probs = np.bincount(inv, weights=w) / w.sum()
    ids = ", ".join(sorted(d.runs))
    runs_used = [r for r in runs if r.manifest.run_id in d.runs]
    return CommitStats(
        regime=regime, steps_per_canvas=Distribution(vals.tolist(), probs.tolist()), tokens_per_call=d.committed / d.denoise,
        content_length=Distribution.from_samples(d.content), renoise_per_generation=RENOISE_PER_GENERATION,
        commit_entropy_nats=COMMIT_ENTROPY_NATS,
        provenance=Provenance("endpoint", f"endpoint runs {ids}: vllm:diffusion_* counter deltas", date=min(r.manifest.started_at for r in runs_used),
                              notes=(f"{len(d.k)} load(s), {w.sum():.0f} canvases; steps per canvas = server engine steps per canvas - 1 "
                                     "(the commit step), distribution over the loads' means weighted by canvases (the counters give sums, "
                                     "not per-canvas values); content length = successful requests' output tokens (truncated at max_tokens); "
                                     f"re-noise count and commit entropy from the published prior ({CITATION})")),
        description=REGIMES[regime][0] if regime in REGIMES else "",
    )


def endpoint_commit_stats(runs: list[Run], msgs: list[str]) -> dict:
    """CommitStats per regime (provenance endpoint) from diffusion endpoint runs' counters; see the
    module docstring. Regimes no single-regime load covers are absent."""
    per: dict[str, RegimeCounters] = {}
    for run in runs:
        require_endpoint_commits(run)
        if run.has("load_summary"):
            _add_commit_loads(run, per, msgs)
    return {regime: _regime_commit_stats(regime, d, runs) for regime, d in sorted(per.items()) if d.content and d.denoise > 0}
