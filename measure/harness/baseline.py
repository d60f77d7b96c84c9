"""Gemma-4 baseline units: AR (prefill + decode steps) and MTP (prefill + rounds of k draft passes
and one verify pass) timing-grid cells, a profiled step range, and MTP probe generations with a
checkpoint (greedy acceptance per draft position). The loops are in measure.harness.causal."""

from __future__ import annotations

import statistics

import numpy as np

from measure.harness import profiling
from measure.harness.causal import CausalGeneration, ar_generation, mtp_generation, safe_token_ids
from measure.harness.config import Cell
from measure.harness.context import RunContext, UnitRows
from measure.harness.diffusion import chat_ids, special_tokens
from measure.harness.kinds import CausalKinds
from measure.probes import Probe, check_answer


def _ids(ctx: RunContext, batch: int, length: int, seed: int):
    import torch  # optional heavy dependency (the measure extra)

    gen = torch.Generator().manual_seed(seed)
    return safe_token_ids(gen, batch, length, ctx.models.model.config.get_text_config().vocab_size).to(ctx.device)


def _rows(ctx: RunContext, gen: CausalGeneration, **stamp) -> list[dict]:
    ctx.timer.sync()
    rows = []
    for i, tp in enumerate(gen.passes):
        gpu, wall = ctx.timer.ms(tp.start, tp.end)
        fwd, _ = ctx.timer.ms(tp.fwd_start, tp.fwd_end)
        rows.append({"pass_kind": tp.kind, "seqs": tp.seqs, "tokens_per_seq": tp.tokens, "context_tokens": tp.context,
                     "gpu_ms": gpu, "wall_ms": wall, "forward_gpu_ms": fwd, "step": i, **tp.extra})
    return ctx.pass_rows(rows, **stamp)


def _run(ctx: RunContext, cell: Cell, ids, seed: int, profiler=None, eos_ids=None) -> CausalGeneration:
    cfg = ctx.cfg
    import torch  # optional heavy dependency (the measure extra)

    with torch.no_grad():
        if not cfg.serving.assistant:
            return ar_generation(ctx.causal, ids, cfg.decode_steps, profiler, cfg.profile_steps)
        return mtp_generation(ctx.causal, ids, cell.draft_tokens, cfg.mtp_rounds, cfg.mtp_acceptance_rate,
                              np.random.default_rng(seed), profiler, cfg.profile_steps, eos_ids)


def timing_cell(ctx: RunContext, unit: str, cell: Cell) -> UnitRows:
    cfg = ctx.cfg
    out = UnitRows()
    for rep in range(cfg.warmup + cfg.repeats):
        warm = rep < cfg.warmup
        ctx.set_phase(f"{unit}/{'warmup' if warm else 'timed'}")
        seed = ctx.seed_for(unit, rep)
        gen = _run(ctx, cell, _ids(ctx, cell.batch, cell.context, seed), seed)
        out.passes += _rows(ctx, gen, warmup=warm, rep=rep, cell=cell.label, prompt_tokens=cell.context)
    kinds = CausalKinds.of(cfg.serving)
    kind = kinds.decode
    timed = [p for p in out.passes if p["pass_kind"] == kind and not p["warmup"]]
    if timed:
        out.summary = (f"{kind} median {statistics.median(p['gpu_ms'] for p in timed):.2f} ms, "
                       f"x_roofline {statistics.median(p['x_roofline'] for p in timed):.2f}")
        drafts = [p["gpu_ms"] for p in out.passes if kinds.draft and p["pass_kind"] == kinds.draft and not p["warmup"]]
        if drafts:
            out.summary += f"; {kinds.draft} median {statistics.median(drafts):.2f} ms"
    return out


def profile_steps(ctx: RunContext, unit: str) -> dict:
    """torch.profiler over decode steps (AR) or rounds (MTP, k = the first --draft-tokens) 2 .. 1+N."""
    cfg, timer = ctx.cfg, ctx.timer
    cell = Cell(cfg.batches[0], cfg.contexts[0], cfg.draft_tokens[0] if cfg.serving.assistant else 0)
    seed = ctx.seed_for(unit)
    ids = _ids(ctx, cell.batch, cell.context, seed)
    ctx.set_phase(f"{unit}/warmup")
    _run(ctx, cell, ids, seed)
    ctx.set_phase(f"{unit}/profiled")
    prof = profiling.new_profiler(timer.cuda)
    gen = _run(ctx, cell, ids, seed, profiler=prof)
    rows = _rows(ctx, gen, warmup=False, rep=0, cell=cell.label, prompt_tokens=cell.context)
    summary = profiling.summarize(prof, cfg.profile_steps, timer.cuda)
    kinds = CausalKinds.of(cfg.serving)
    kind = kinds.decode
    timed = [r["gpu_ms"] for r in rows if r["pass_kind"] == kind]
    extra = {"unit": unit, "pass_kind": kind if kinds.draft is None else f"{cfg.mode} round (k={cell.draft_tokens} {kinds.draft} + {kind})",
             "seqs": cell.batch, "context_tokens": cell.context, "engine": cfg.engine, "experts_implementation": cfg.experts_implementation,
             f"{kind}_gpu_ms_median_in_profiled_generation": statistics.median(timed) if timed else None,
             "note": "per step = per decode step (AR) or per draft/verify round (MTP); profiler overhead included"}
    profiling.write(ctx.run_dir, unit, summary, extra)
    return {**extra, **summary}


def mtp_probe_unit(ctx: RunContext, unit: str, probe: Probe) -> UnitRows:
    """A checkpoint's greedy MTP acceptance on one probe prompt: every seed and every k, batch 1.
    Greedy decoding is deterministic, so seeds only repeat the measurement of timing."""
    cfg, tok = ctx.cfg, ctx.models.tokenizer
    eos, _ = special_tokens(ctx.models.model)
    ids = chat_ids(tok, probe.prompt).to(ctx.device)
    out = UnitRows()
    for k in cfg.draft_tokens:
        for s in cfg.probe_seeds:
            ctx.set_phase(f"{unit}/k{k}/seed{s}")
            cell = Cell(1, int(ids.shape[1]), k)
            gen = _run(ctx, cell, ids, ctx.seed_for(probe.prompt_id, k, s), eos_ids=eos)
            text = tok.decode(gen.sequences[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
            out.passes += _rows(ctx, gen, warmup=False, rep=s, cell=f"probe-{probe.regime}-k{k}", prompt_tokens=cell.context, prompt_id=probe.prompt_id,
                                regime=probe.regime, correct=check_answer(probe, text))
    verify = CausalKinds.of(cfg.serving).decode
    acc = [p["accepted_drafts"] for p in out.passes if p["pass_kind"] == verify]
    out.summary = f"{probe.prompt_id}: {len(acc)} verify rounds, mean accepted drafts {statistics.mean(acc):.2f}" if acc else probe.prompt_id
    return out
