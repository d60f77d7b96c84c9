"""DiffusionGemma units: a timing-grid cell, the hook-overhead measurement, a profiled step range,
and probe generations. Every generation is transformers' own `generate` under the instrument.

Engine settings: eager = dynamic cache, no compilation (`disable_compile=True`); compiled =
`cache_implementation="static"`, with which `generate` compiles the encoder, the decoder and the
sampler with torch.compile "reduce-overhead" (CUDA graphs) on its first call per shape (the
unit's warm-up generations absorb that). Timing-grid generations disable EOS so every request
runs the requested number of blocks.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from costmodel import atomic
from measure.harness import profiling
from measure.harness.causal import safe_token_ids
from measure.harness.config import Cell
from measure.harness.context import RunContext, UnitRows
from measure.harness.hook import DiffusionInstrument, GenerationTrace
from measure.harness.kinds import CanvasKinds
from measure.probes import Probe, check_answer


def _ids_list(v) -> list[int]:
    if v is None:
        return []
    return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]


def special_tokens(model) -> tuple[list[int], int | None]:
    """(EOS ids, pad id) from the generation config, else the text config."""
    gc, tc = model.generation_config, model.config.get_text_config()
    eos = _ids_list(getattr(gc, "eos_token_id", None)) or _ids_list(getattr(tc, "eos_token_id", None))
    pad = getattr(gc, "pad_token_id", None)
    pad = pad if pad is not None else getattr(tc, "pad_token_id", None)
    return eos, pad


def generate_kwargs(ctx: RunContext, eos_off: bool) -> dict:
    cfg, C = ctx.cfg, ctx.models.model.config.canvas_length
    kw = dict(max_new_tokens=cfg.blocks * C, max_denoising_steps=cfg.max_denoising_steps, return_dict_in_generate=True)
    if cfg.engine == "compiled":
        kw["cache_implementation"] = "static"
    else:
        kw["disable_compile"] = True
    if eos_off:
        kw["eos_token_id"] = None
    return kw


def _instrument(ctx: RunContext) -> DiffusionInstrument:
    """The commit hook on the run's model, recording the measured mode's pass kinds."""
    return DiffusionInstrument(ctx.models.model, ctx.timer, record_commits=True, kinds=CanvasKinds.of(ctx.cfg.serving))


def _generate(ctx: RunContext, ids, kw: dict, seed: int):
    import torch  # optional heavy dependency (the measure extra)

    torch.manual_seed(seed)
    with torch.no_grad():
        return ctx.models.model.generate(ids.to(ctx.device), **kw)


def _random_ids(ctx: RunContext, batch: int, length: int, seed: int):
    import torch  # optional heavy dependency (the measure extra)

    gen = torch.Generator().manual_seed(seed)
    return safe_token_ids(gen, batch, length, ctx.models.model.config.get_text_config().vocab_size)


def _trace_rows(ctx: RunContext, trace: GenerationTrace, gen_ids: list[str], meta: list[dict], call_ms: tuple[float, float]) -> UnitRows:
    """Commit and generation rows of one traced generate call (row r of the batch is gen_ids[r])."""
    rows = UnitRows()
    for c in trace.commits:
        rows.commits.append({"gen_id": gen_ids[c["row"]], **{k: v for k, v in c.items() if k != "row"}})
    for g in trace.canvases:
        r = g["row"]
        rows.generations.append({"gen_id": gen_ids[r], **meta[r], **{k: v for k, v in g.items() if k != "row"},
                                 "batch": trace.batch, "prompt_tokens": trace.prompt_tokens,
                                 "generate_gpu_ms": call_ms[0], "generate_wall_ms": call_ms[1]})
    return rows


def timing_cell(ctx: RunContext, unit: str, cell: Cell) -> UnitRows:
    """Warm-up then timed generations of `cell.batch` random prompts of `cell.context` tokens."""
    cfg, model, timer = ctx.cfg, ctx.models.model, ctx.timer
    eos, pad = special_tokens(model)
    kw = generate_kwargs(ctx, eos_off=True)
    out = UnitRows()
    with _instrument(ctx) as inst:
        for rep in range(cfg.warmup + cfg.repeats):
            warm = rep < cfg.warmup
            ctx.set_phase(f"{unit}/{'warmup' if warm else 'timed'}")
            seed = ctx.seed_for(unit, rep)
            ids = _random_ids(ctx, cell.batch, cell.context, seed)
            plan, regimes = None, [None] * cell.batch
            if ctx.schedule is not None:
                rng = np.random.default_rng(seed)
                regimes = [ctx.schedule.regime_for(r, rep) for r in range(cell.batch)]
                plan = [ctx.schedule.draw(rng, regimes[r], cfg.blocks, cfg.max_denoising_steps) for r in range(cell.batch)]
            inst.start(cell.batch, cell.context, plan)
            a = timer.mark()
            res = _generate(ctx, ids, kw, seed)
            b = timer.mark()
            trace = inst.collect(res.sequences, stop_token_ids=[], special_token_ids=eos + ([pad] if pad is not None else []))
            call_ms = timer.ms(a, b)
            out.passes += ctx.pass_rows(trace.passes, warmup=warm, rep=rep, cell=cell.label)
            if warm:
                continue
            gen_ids = [f"{unit}/rep{rep}/row{r}" for r in range(cell.batch)]
            meta = [{"regime": regimes[r] or "grid", "prompt_id": f"random-P{cell.context}", "seed": seed, "split": "none",
                     "rep": rep, "replay_steps": plan[r] if plan else None} for r in range(cell.batch)]
            rows = _trace_rows(ctx, trace, gen_ids, meta, call_ms)
            out.commits += rows.commits
            out.generations += rows.generations
    steps = [p["gpu_ms"] for p in out.passes if p["pass_kind"] == inst.kinds.denoise and not p["warmup"]]
    roof = [p["x_roofline"] for p in out.passes if p["pass_kind"] == inst.kinds.denoise and not p["warmup"]]
    if steps:
        out.summary = f"{inst.kinds.denoise} median {statistics.median(steps):.2f} ms over {len(steps)} steps, x_roofline {statistics.median(roof):.2f}"
    return out


@dataclass
class OverheadPairs:
    """Whole generate calls timed in pairs, plain and hooked (same seed and prompt): (gpu_ms, wall_ms) per call."""

    plain: list = field(default_factory=list)
    hooked: list = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)  # per pair: the two calls' outputs are equal
    step_ms: list[float] = field(default_factory=list)  # instrumented denoise_step GPU times


def _time_overhead_pairs(ctx: RunContext, unit: str) -> OverheadPairs:
    """One warm-up pair, then hook_overhead_repeats pairs at the first grid cell, order alternated."""
    import torch  # optional heavy dependency (the measure extra)

    cfg, model, timer = ctx.cfg, ctx.models.model, ctx.timer
    B, P = cfg.batches[0], cfg.contexts[0]
    eos, pad = special_tokens(model)
    kw = generate_kwargs(ctx, eos_off=True)
    pairs = OverheadPairs()
    inst = _instrument(ctx)

    def one(variant: str, seed: int, ids):
        ctx.set_phase(f"{unit}/{variant}")
        if variant == "hooked":
            with inst:
                inst.start(B, P, None)
                a = timer.mark()
                out = _generate(ctx, ids, kw, seed)
                b = timer.mark()
                trace = inst.collect(out.sequences, stop_token_ids=[], special_token_ids=eos + ([pad] if pad is not None else []))
            pairs.step_ms.extend(p["gpu_ms"] for p in trace.passes if p["pass_kind"] == inst.kinds.denoise)
        else:
            a = timer.mark()
            out = _generate(ctx, ids, kw, seed)
            b = timer.mark()
            timer.sync()
        return timer.ms(a, b), out.sequences.cpu()

    seed0 = ctx.seed_for(unit, "warm")
    ids0 = _random_ids(ctx, B, P, seed0)
    one("plain", seed0, ids0)
    one("hooked", seed0, ids0)
    pairs.step_ms.clear()
    for i in range(cfg.hook_overhead_repeats):
        seed = ctx.seed_for(unit, i)
        ids = _random_ids(ctx, B, P, seed)
        order = ("plain", "hooked") if i % 2 == 0 else ("hooked", "plain")
        seqs = {}
        for v in order:
            ms, seqs[v] = one(v, seed, ids)
            getattr(pairs, v).append(ms)
        pairs.identical.append(bool(torch.equal(seqs["plain"], seqs["hooked"])))
    return pairs


def hook_overhead(ctx: RunContext, unit: str) -> dict:
    """Whole generate calls with and without the instrument (same seeds, interleaved), at the first
    grid cell with no replay: the instrument's cost per denoising step, and whether the outputs match."""
    cfg = ctx.cfg
    pairs = _time_overhead_pairs(ctx, unit)
    steps_per_call = cfg.blocks * cfg.max_denoising_steps
    diffs = [h[1] - p[1] for h, p in zip(pairs.hooked, pairs.plain)]  # same seed and prompt per pair
    per_step = statistics.median(diffs) / steps_per_call
    step = statistics.median(pairs.step_ms) if pairs.step_ms else float("nan")
    doc = {
        "unit": unit, "engine": cfg.engine, "batch": cfg.batches[0], "prompt_tokens": cfg.contexts[0], "blocks": cfg.blocks,
        "denoising_steps_per_call": steps_per_call, "repeats": cfg.hook_overhead_repeats,
        "plain_call_ms": [{"gpu_ms": g, "wall_ms": w} for g, w in pairs.plain],
        "hooked_call_ms": [{"gpu_ms": g, "wall_ms": w} for g, w in pairs.hooked],
        "plain_call_wall_ms_median": statistics.median(m[1] for m in pairs.plain),
        "hooked_call_wall_ms_median": statistics.median(m[1] for m in pairs.hooked),
        "pair_difference_ms": diffs,
        "overhead_ms_per_step": per_step, "denoise_step_gpu_ms_median": step,
        "overhead_pct_of_step": 100.0 * per_step / step if step == step and step > 0 else float("nan"),
        "identical_outputs": all(pairs.identical), "identical_pairs": f"{sum(pairs.identical)}/{len(pairs.identical)}",
        "method": ("median over pairs (same seed and prompt, order alternated) of the wall time of a whole generate call "
                   "(synchronised at the end) with the instrument (pass timers + accept_canvas hook recording commits) minus the "
                   "same call without any wrapper, divided by the denoising steps per call; pct relative to the median "
                   "instrumented denoise_step GPU time"),
    }
    atomic.write_json(ctx.run_dir / "hook_overhead.json", doc)
    return doc


def profile_steps(ctx: RunContext, unit: str) -> dict:
    """torch.profiler over denoising steps 2 .. 1+N of one generation at the first grid cell."""
    cfg, model, timer = ctx.cfg, ctx.models.model, ctx.timer
    B, P, N = cfg.batches[0], cfg.contexts[0], cfg.profile_steps
    kw = generate_kwargs(ctx, eos_off=True)
    kw["max_denoising_steps"] = max(cfg.max_denoising_steps, N + 1)
    ids = _random_ids(ctx, B, P, ctx.seed_for(unit))
    eos, pad = special_tokens(model)
    with _instrument(ctx) as inst:
        for phase in ("warmup", "profiled"):
            ctx.set_phase(f"{unit}/{phase}")
            inst.start(B, P, None)
            if phase == "profiled":
                inst.profiler = profiling.new_profiler(timer.cuda)
                inst.profile_range = (1, N)
                prof = inst.profiler
            out = _generate(ctx, ids, kw, ctx.seed_for(unit))
            trace = inst.collect(out.sequences, stop_token_ids=[], special_token_ids=eos + ([pad] if pad is not None else []))
    summary = profiling.summarize(prof, N, timer.cuda)
    steps = [p for p in trace.passes if p["pass_kind"] == inst.kinds.denoise][1:N + 1]
    extra = {"unit": unit, "pass_kind": inst.kinds.denoise, "seqs": B, "context_tokens": P, "engine": cfg.engine,
             "experts_implementation": cfg.experts_implementation,
             "profiled_step_gpu_ms_median": statistics.median(p["gpu_ms"] for p in steps) if steps else None,
             "note": "profiler overhead included in the profiled steps' own timings; the timing grid's medians are the reference"}
    profiling.write(ctx.run_dir, unit, summary, extra)
    return {**extra, **summary}


def chat_ids(tokenizer, prompt: str):
    """Token ids of a one-turn chat with the generation prompt, as the checkpoint's template writes it."""
    import torch  # optional heavy dependency (the measure extra)

    msgs = [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_tensors="pt", return_dict=True)["input_ids"]
    else:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    return ids if isinstance(ids, torch.Tensor) else torch.tensor(ids)


def probe_unit(ctx: RunContext, unit: str, probe: Probe) -> UnitRows:
    """Every seed of one probe prompt, batch 1, with the checkpoint's own generation settings."""
    cfg, model, timer, tok = ctx.cfg, ctx.models.model, ctx.timer, ctx.models.tokenizer
    eos, pad = special_tokens(model)
    kw = generate_kwargs(ctx, eos_off=False)
    ids = chat_ids(tok, probe.prompt)
    P = int(ids.shape[1])
    out = UnitRows()
    with _instrument(ctx) as inst:
        for s in cfg.probe_seeds:
            ctx.set_phase(f"{unit}/seed{s}")
            seed = ctx.seed_for(probe.prompt_id, s)
            inst.start(1, P, None)
            a = timer.mark()
            res = _generate(ctx, ids, kw, seed)
            b = timer.mark()
            trace = inst.collect(res.sequences, stop_token_ids=eos, special_token_ids=eos + ([pad] if pad is not None else []))
            text = tok.decode(res.sequences[0, P:].tolist(), skip_special_tokens=True)
            correct = check_answer(probe, text)
            out.passes += ctx.pass_rows(trace.passes, warmup=False, rep=s, cell=f"probe-{probe.regime}")
            gid = f"{probe.prompt_id}/seed{s}"
            meta = [{"regime": probe.regime, "prompt_id": probe.prompt_id, "seed": s, "split": probe.split, "rep": s,
                     "replay_steps": None, "text": text, "correct": correct}]
            rows = _trace_rows(ctx, trace, [gid], meta, timer.ms(a, b))
            out.commits += rows.commits
            out.generations += rows.generations
    scored = [g["correct"] for g in out.generations if g["canvas"] == 0 and g["correct"] is not None]
    out.summary = f"{probe.prompt_id}: {len(cfg.probe_seeds)} seeds" + (f", {sum(scored)}/{len(scored)} correct" if scored else "")
    return out
