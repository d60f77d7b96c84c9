"""`vllm bench serve --save-result` JSON files -> a run directory (kind "bench-import").

Each result (a file holds one JSON object, or several on separate lines with --append-result)
becomes one unit "<file name>#<i>" with one `load_summary` row:
- duration_s, completed, failed, qps_offered (request_rate; "inf" -> inf), concurrency
  (max_concurrency; 0 = unbounded), burstiness, request_throughput_rps (request_throughput),
  output_throughput_tok_s, total_token_throughput_tok_s, total_input_tokens, total_output_tokens;
- every latency statistic as vLLM names it: (mean|median|std|pNN)_(ttft|tpot|itl|e2el)_ms;
  p50_* is taken from median_* when the file lacks it;
- spec_decode_* -> sd_* columns: acceptance rate as a fraction (vLLM writes a percentage; the
  counts are used when present), mean acceptance length, drafts, draft/accepted tokens and
  per-position rates (fractions);
- diffusion_* -> dg_* columns (dg_denoising_steps: engine steps, commit steps included;
  dg_steps_per_canvas: k + 1). vLLM 0.32 writes diffusion_denoising_steps (commit steps EXCLUDED),
  diffusion_canvas_positions, diffusion_committed_tokens, diffusion_steps_per_canvas (k, commits
  excluded), diffusion_committed_per_step, diffusion_committed_throughput (seen in real
  `vllm bench serve --save-result` files; `_vllm032_diffusion`); files with the counter names
  diffusion_num_denoising_steps / _num_canvas_positions / _num_committed_tokens and the ratios
  diffusion_steps_per_canvas, diffusion_committed_tokens_per_step are read as counters (ratios
  recomputed from the counts when both are present). Other diffusion_* keys are kept verbatim.
The canvas length is the one the server ran, read from the file's own counters (positions / engine
steps, as vllm/benchmarks/serve.py computes it: `canvas_from_counters`), not from the model's name:
a server started with `--diffusion-config '{"canvas_length": 32}'` serves canvases of 32 whatever
its model's config says. `--canvas-length` wins over the counters (with a note where they differ);
the catalog model's canvas is used only for a file without counters.
With --save-detailed (input_lens, output_lens, ttfts, itls, errors) the per-request arrays become
`requests` and `chunks` rows; their times are relative to each request's own start (start_s = 0;
vLLM does not save send times), finish_s = ttft + sum(itls), chunk token counts unknown (NaN).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from costmodel.errors import UserError
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.bench_result import DETAIL, NUMERIC, PCT_KEY, canvas_from_counters, infer_mode, read_results
from costmodel.schemas.bench_result import number as _num
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id, software_versions
from measure.endpoint.loadtest import canvas_length_for, write_mtp_counters
from measure.endpoint.runner import server_columns

def _vllm032_diffusion(r: dict, canvas_length: int) -> tuple[float, float, float, float, float]:
    """(engine steps incl. commits, canvas positions, committed tokens, canvases, engine steps per canvas)
    from vLLM 0.32's keys, as its vllm/benchmarks/serve.py computes them: canvas length = Δpositions /
    Δsteps, canvases = Δcommitted / canvas length, diffusion_denoising_steps = Δsteps - canvases (commit
    steps excluded) and diffusion_steps_per_canvas = k (commits excluded); this table keeps engine
    steps with the commit step included (k + 1 per canvas)."""
    den, pos, comm = _num(r, "diffusion_denoising_steps"), _num(r, "diffusion_canvas_positions"), _num(r, "diffusion_committed_tokens")
    canvases = comm / canvas_length if not math.isnan(comm) else math.nan
    steps = den + canvases if not math.isnan(den) and not math.isnan(canvases) else math.nan
    k = _num(r, "diffusion_steps_per_canvas")
    spc = steps / canvases if canvases and not math.isnan(steps) else (k + 1 if not math.isnan(k) else math.nan)
    return steps, pos, comm, canvases, spc


def summary_row(r: dict, canvas_length: int) -> dict:
    rate = r.get("request_rate")
    completed = int(r["completed"])
    failed = r.get("failed")
    if failed is None:
        failed = max(0, int(r.get("num_prompts") or completed) - completed)
    row = {
        "source": "bench-import", "duration_s": float(r["duration"]), "completed": completed, "failed": int(failed),
        "qps_offered": math.inf if rate in (None, "inf") else float(rate), "concurrency": int(r.get("max_concurrency") or 0),
        "burstiness": _num(r, "burstiness"), "planned_requests": int(r.get("num_prompts") or completed + int(failed)),
        "request_throughput_rps": _num(r, "request_throughput"), "output_throughput_tok_s": _num(r, "output_throughput"),
        "total_token_throughput_tok_s": _num(r, "total_token_throughput"), "total_input_tokens": _num(r, "total_input_tokens"),
        "total_output_tokens": _num(r, "total_output_tokens"), "max_output_tokens_per_s": _num(r, "max_output_tokens_per_s"),
        "max_concurrent_requests": _num(r, "max_concurrent_requests"),
        "bench_date": str(r.get("date", "")), "bench_backend": str(r.get("backend", r.get("endpoint_type", ""))), "bench_label": str(r.get("label") or ""),
    }
    for k, v in r.items():
        if PCT_KEY.match(k):
            row[k] = float(v) if v is not None else math.nan
    for m in ("ttft", "tpot", "itl", "e2el"):
        if f"p50_{m}_ms" not in row and f"median_{m}_ms" in row:
            row[f"p50_{m}_ms"] = row[f"median_{m}_ms"]
    row.update(server_columns(None))
    row["metrics_scrapes_ok"] = 0
    # speculative decoding
    if any(k.startswith("spec_decode_") for k in r):
        drafts, dtoks, acc = _num(r, "spec_decode_num_drafts"), _num(r, "spec_decode_draft_tokens"), _num(r, "spec_decode_accepted_tokens")
        rate_frac = acc / dtoks if dtoks and not math.isnan(acc) and not math.isnan(dtoks) else _num(r, "spec_decode_acceptance_rate") / 100.0
        length = 1 + acc / drafts if drafts and not math.isnan(acc) and not math.isnan(drafts) else _num(r, "spec_decode_acceptance_length")
        per_pos = r.get("spec_decode_per_position_acceptance_rates") or []
        if not isinstance(per_pos, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in per_pos):
            raise UserError(f"bench result: spec_decode_per_position_acceptance_rates is {per_pos!r}", "expected fractions in [0, 1]")
        row.update(sd_num_drafts=drafts, sd_num_draft_tokens=dtoks, sd_num_accepted_tokens=acc, sd_acceptance_rate=rate_frac,
                   sd_mean_acceptance_length=length, sd_draft_tokens_per_step=dtoks / drafts if drafts and not math.isnan(dtoks) else math.nan,
                   sd_per_position_rates=json.dumps([float(x) for x in per_pos]))
    # diffusion
    if any(k.startswith("diffusion_") for k in r) and "diffusion_denoising_steps" in r:
        steps, pos, comm, canvases, spc = _vllm032_diffusion(r, canvas_length)
        cps = comm / steps if steps and not math.isnan(comm) else math.nan
    elif any(k.startswith("diffusion_") for k in r):
        steps, pos, comm = _num(r, "diffusion_num_denoising_steps"), _num(r, "diffusion_num_canvas_positions"), _num(r, "diffusion_num_committed_tokens")
        canvases = pos / canvas_length if not math.isnan(pos) else math.nan
        spc = steps / canvases if canvases and not math.isnan(canvases) and not math.isnan(steps) else _num(r, "diffusion_steps_per_canvas")
        cps = comm / steps if steps and not math.isnan(comm) and not math.isnan(steps) else _num(r, "diffusion_committed_tokens_per_step")
    if any(k.startswith("diffusion_") for k in r):
        row.update(dg_denoising_steps=steps, dg_canvas_positions=pos, dg_committed_tokens=comm, dg_canvases=canvases, dg_canvas_length=canvas_length,
                   dg_steps_per_canvas=spc, dg_denoise_steps_per_canvas=spc - 1 if not math.isnan(spc) else math.nan,
                   dg_committed_tokens_per_step=cps, dg_committed_tokens_per_canvas=comm / canvases if canvases and not math.isnan(comm) else math.nan)
        extra = {k: v for k, v in r.items() if k.startswith("diffusion_") and k not in (
            "diffusion_num_denoising_steps", "diffusion_num_canvas_positions", "diffusion_num_committed_tokens",
            "diffusion_steps_per_canvas", "diffusion_committed_tokens_per_step", "diffusion_denoising_steps", "diffusion_canvas_positions",
            "diffusion_committed_tokens")}
        row["dg_extra"] = json.dumps(extra, sort_keys=True, default=str)
    known = set(NUMERIC) | set(DETAIL) | {"date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "request_rate", "max_concurrency",
                                          "request_goodput", "generated_texts", "spec_decode_per_position_acceptance_rates", "rps_change_events",
                                          "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"}
    row["bench_extra"] = json.dumps({k: v for k, v in r.items() if k not in known and not PCT_KEY.match(k) and not k.startswith(("diffusion_", "spec_decode_"))},
                                    sort_keys=True, default=str)
    return row


def detail_rows(r: dict, unit: str) -> tuple[list[dict], list[dict]]:
    """requests and chunks rows from --save-detailed arrays (empty lists without them)."""
    if "ttfts" not in r or "output_lens" not in r:
        return [], []
    n = len(r["ttfts"])
    itls = r.get("itls") or [[] for _ in range(n)]
    ins = r.get("input_lens") or [math.nan] * n
    errs = r.get("errors") or [""] * n
    reqs, chunks = [], []
    for i in range(n):
        rid = f"{unit}-{i:06d}"
        err = errs[i] or ""
        ok = not err
        ttft = float(r["ttfts"][i] or 0.0)
        gaps = [float(x) for x in itls[i]]
        out_tokens = int(r["output_lens"][i] or 0)
        finish = ttft + sum(gaps)
        reqs.append({
            "request_id": rid, "prompt_id": str(i), "regime": None, "arrival_s": math.nan, "dispatch_s": math.nan, "start_s": 0.0,
            "first_token_s": ttft if ok else math.nan, "finish_s": finish if ok else math.nan, "prompt_tokens": float(ins[i]),
            "output_tokens": out_tokens, "status": "ok" if ok else "error", "failure_reason": None if ok else "reported_by_bench",
            "error_detail": None if ok else " ".join(err.split())[-200:], "http_status": None, "finish_reason": None, "tokens_source": "unknown",
            "n_chunks": len(gaps) + 1 if ok else 0, "max_tokens": 0, "lateness_ms": math.nan, "wait_ms": math.nan,
            "ttft_ms": ttft * 1e3 if ok else math.nan, "e2e_ms": finish * 1e3 if ok else math.nan,
            "itl_mean_ms": sum(gaps) / len(gaps) * 1e3 if ok and gaps else math.nan,
            "tpot_ms": (finish - ttft) / (out_tokens - 1) * 1e3 if ok and out_tokens > 1 else math.nan,
        })
        if ok:
            t = ttft
            chunks.append({"request_id": rid, "chunk_index": 0, "t_s": t, "tokens": math.nan})
            for j, g in enumerate(gaps, 1):
                t += g
                chunks.append({"request_id": rid, "chunk_index": j, "t_s": t, "tokens": math.nan})
    return reqs, chunks


def import_files(files: list[str], out: str, model: str | None, mode: ServingMode | None, canvas_length: int | None, resume: bool) -> tuple[str, list[dict]]:
    """Write the run; returns (out, the summary rows written)."""
    if not files:
        raise UserError("no bench result files given", "pass one or more `vllm bench serve --save-result` JSON files")
    loaded = [(Path(f), read_results(Path(f))) for f in files]
    allres = [r for _, rs in loaded for r in rs]
    models = sorted({r["model_id"] for r in allres if isinstance(r.get("model_id"), str)})
    if model is None:
        if not models:
            raise UserError("the bench results name no model_id", "pass --model NAME")
        if len(models) > 1:
            raise UserError(f"the bench results are of several models ({', '.join(models)})", "import each model's files into its own run, or pass --model")
        model = models[0]
    mode = mode or get_mode(infer_mode(allres, model))
    canvas, canvas_source, notes = _canvas(allres, model, canvas_length)
    units = [f"{p.name}#{i}" for p, rs in loaded for i in range(len(rs))]
    if len(set(units)) != len(units):
        raise UserError("two bench files share a file name", "rename one, or import them into separate runs")
    has_dg = any(any(k.startswith(("diffusion_num_", "diffusion_denoising_steps")) for k in r) for r in allres)
    manifest = RunManifest(
        run_id=new_run_id("bench"), kind="bench-import", mode=mode.name, model=model, weights="served",
        commit_source="model" if has_dg and mode.decodes_canvases else "none",
        engine={"name": "vllm", "via": "vllm bench serve --save-result"},
        settings={"files": [str(p) for p, _ in loaded], "canvas_length": canvas, "canvas_length_source": canvas_source, "models_in_files": models},
        software=software_versions(), planned_units=units,
        notes=["imported from `vllm bench serve` results; per-request times (if any) are relative to each request's start", *notes],
    )
    rows = []
    with RunWriter(out, manifest, resume=resume) as w:
        for (p, rs) in loaded:
            for i, r in enumerate(rs):
                unit = f"{p.name}#{i}"
                if w.is_done(unit):
                    continue
                row = summary_row(r, canvas)
                row["bench_model_id"] = str(r.get("model_id", ""))
                w.add("load_summary", row)
                reqs, chunks = detail_rows(r, unit.replace("#", "-"))
                if reqs:
                    w.add("requests", reqs)
                if chunks:
                    w.add("chunks", chunks)
                w.finish_unit(unit)
                rows.append({"unit": unit, **row})
        if mode.vllm_speculative_method:  # vLLM's spec-decode counters
            write_mtp_counters(w.path, model)
    return out, rows


def _canvas(results: list[dict], model: str, given: int | None) -> tuple[int, str, list[str]]:
    """(canvas length, where it came from, notes): --canvas-length, else the files' counters (one
    value for all: a run is one server set-up), else the catalog model's (costmodel/engine_settings.py
    order: CLI, recorded run, default)."""
    seen = sorted({c for c in (canvas_from_counters(r) for r in results if any(k.startswith("diffusion_") for k in r)) if c is not None})
    if len(seen) > 1:
        raise UserError(f"the bench results' counters imply different canvas lengths ({', '.join(f'{c:g}' for c in seen)})",
                        "import each server set-up's files into its own run")
    if given:
        notes = [f"--canvas-length {given} given; the files' counters imply {seen[0]:g}"] if seen and seen[0] != given else []
        return int(given), "CLI (--canvas-length)", notes
    if seen:
        return int(seen[0]), "recorded run: the files' counters (positions / engine steps, vllm/benchmarks/serve.py)", []
    return canvas_length_for(model, None), "default: the catalog model's canvas_length (no diffusion counters in the files)", []
