"""The calibration design of a GPU engine run: which engines (settings) and which loads per mode.

Covers the batch compositions plans reach (issue 37): closed loops from one request to
saturation (AR and MTP to 128 in flight, DiffusionGemma to its max_num_seqs), Poisson arrivals at
several rates, prompts from ~128 to 4,096 tokens, outputs to 1,024. DiffusionGemma runs at the
model's default max_denoising_steps (48) and at 16; MTP with k = 4 at vLLM's benchmark acceptance
(0.8 per token, unconditional per position 0.8^i). Every load has a name; which loads fit a
profile and which check it is chosen when fitting (`costmodel fit --holdout-loads`), not here.

Sizes are set so one mode fits one ten-minute device call beside the engine's cold start
(140-220 s): each closed loop runs about two waves of requests. Half of such a loop's requests
arrive in its opening burst, so each mode also has a "-steady" setup, checks only: closed loops of
eight waves, whose TTFT and TPOT percentiles are the steady state's (docs/measure.md).
"""

from __future__ import annotations

from pathlib import Path

from costmodel.errors import UserError
from costmodel.schemas.engine_loads import loads_json
from costmodel.schemas.engine_setup import WARMUP, EngineSetup, Load
from costmodel.schemas.rundir import load_run


def _closed(levels, prompt=(128, 4096), output=(128, 1024), waves=2, tag="") -> tuple[Load, ...]:
    return tuple(Load(f"closed-c{c}{tag}", n=max(waves * c, 3), concurrency=c, prompt_tokens=prompt, output_tokens=output) for c in levels)


AR_LOADS = (WARMUP, *_closed((1, 2, 4, 8, 16, 32, 64, 128)),
            Load("poisson-r1", n=40, rate_rps=1.0), Load("poisson-r4", n=80, rate_rps=4.0), Load("poisson-r10", n=120, rate_rps=10.0),
            Load("closed-c16-long-prompt", n=32, concurrency=16, prompt_tokens=(3072, 4096), output_tokens=(64, 256)),
            Load("closed-c64-short", n=128, concurrency=64, prompt_tokens=(128, 256), output_tokens=(256, 512)))

DIFFUSION_LOADS = (WARMUP, *_closed((1, 2, 3, 4, 6, 8, 12, 16), output=(128, 512)),
                   Load("poisson-r0.5", n=24, rate_rps=0.5, output_tokens=(128, 512)),
                   Load("poisson-r2", n=40, rate_rps=2.0, output_tokens=(128, 512)),
                   Load("closed-c4-long", n=8, concurrency=4, prompt_tokens=(2048, 4096), output_tokens=(768, 1024)),
                   # prefills alone (one request in flight, one canvas each, prompts over the whole range): a prefill
                   # otherwise shares its steps with canvases, and its price, which decides the H200's crossover, was
                   # left to the joint fit (docs/measure.md); last, so that the loads before it keep their seeds
                   Load("closed-c1-prompts", n=24, concurrency=1, prompt_tokens=(128, 4096), output_tokens=(16, 32)))
DIFFUSION_LOADS_16 = (WARMUP, *_closed((1, 4, 8, 16), output=(256, 1024)),
                      Load("poisson-r1", n=30, rate_rps=1.0, output_tokens=(256, 1024)))

# checks: other concurrencies, Poisson rates and prompt lengths than the fitted loads; the fitted
# loads reach each CUDA-graph regime (AR/MTP at 128 in flight run 640-token verify steps past the 512-token graphs)
CAUSAL_HOLDOUT = ("closed-c2", "closed-c8", "closed-c32", "closed-c64", "poisson-r4", "closed-c16-long-prompt")
CAUSAL = (EngineSetup("default", AR_LOADS, holdout=CAUSAL_HOLDOUT, anchor="closed-c16"),)
ASSISTED = (EngineSetup("k4-a0.8", AR_LOADS, {"num_speculative_tokens": 4, "acceptance": 0.8}, CAUSAL_HOLDOUT, anchor="closed-c16"),)
CANVAS = (EngineSetup("steps48", DIFFUSION_LOADS, {"max_denoising_steps": 48, "max_num_seqs": 16},
                      ("closed-c2", "closed-c12", "poisson-r2", "closed-c4-long"), anchor="closed-c4"),
          EngineSetup("steps16", DIFFUSION_LOADS_16, {"max_denoising_steps": 16, "max_num_seqs": 16}, ("closed-c8", "poisson-r1"),
                      anchor="closed-c4"))


# steady state: eight requests per client, so the opening burst is an eighth of each loop's requests
STEADY_WAVES = 8
CAUSAL_STEADY = _closed((16, 32, 64, 128), waves=STEADY_WAVES, tag="-steady")
CANVAS_STEADY = _closed((4, 8, 16), output=(128, 512), waves=STEADY_WAVES, tag="-steady")


def _steady(setup: EngineSetup, loads: tuple[Load, ...]) -> EngineSetup:
    """The setup's engine settings with the steady loads, every one a check."""
    return EngineSetup(f"{setup.label}-steady", (WARMUP, *loads), setup.settings, tuple(ld.name for ld in loads))


CAUSAL = (*CAUSAL, _steady(CAUSAL[0], CAUSAL_STEADY))
ASSISTED = (*ASSISTED, _steady(ASSISTED[0], CAUSAL_STEADY))
CANVAS = (*CANVAS, _steady(CANVAS[0], CANVAS_STEADY))


# The settings matrix (issue 49): engine settings sets beside the first design's, each a whole engine start with its
# own warm-up over its own shapes, so that a profile can be scored on settings its fit never saw (leave one settings
# set out: benchmarks/bench_engine.py). Token budgets 2,048 / 16,384 beside vLLM serve's 8,192; max_num_seqs 64 / 256
# (AR, MTP) and 4 / 8 / 12 (DiffusionGemma); 24 denoising steps; MTP k 2 / 5 at acceptance 0.6 / 0.9; prompts 64 to
# 8,192 tokens (fixed long ones and mixes), outputs 64 to 2,048; closed loops, Poisson at three rates, bursty arrivals.
LONG_CONTEXT = 16384  # max_model_len of the long-prompt sets: an 8,192-token prompt and its answer
MIXED = dict(prompt_tokens=(64, 6000), output_tokens=(64, 2048))  # open loads' mixed lengths (within 8,192 in all)
LONG = dict(prompt_tokens=(8000, 8192), output_tokens=(64, 256))  # a fixed long prompt
LONG_MIXED = dict(prompt_tokens=(64, 8192), output_tokens=(64, 1024))
# Sized so that a setup's loads take about a minute on an H200 beside its engine start: three settings sets of one
# mode fit one ten-minute device call on one GPU (a cold start is 150-330 s, a warm one 30-90 s).


def _warmup(longest: int) -> Load:
    """The warm-up over a setup's own prompt lengths (first-use compilations per shape: measure/fit/stalls.py)."""
    return Load(WARMUP.name, n=WARMUP.n, concurrency=WARMUP.concurrency, prompt_tokens=(64, longest), output_tokens=WARMUP.output_tokens)


def _open(rates_n, cv: float | None = None, **lengths) -> tuple[Load, ...]:
    """Open loads, (rate, requests) each: Poisson, or gamma-bursty with coefficient of variation `cv`."""
    kind = f"gamma-cv{cv:g}" if cv else "poisson"
    return tuple(Load(f"{kind}-r{r:g}", n=n, rate_rps=r, arrival_cv=cv, **lengths) for r, n in rates_n)


def _loop(c: int, n: int, **lengths) -> Load:
    return Load(f"closed-c{c}", n=n, concurrency=c, **{"output_tokens": (64, 1024), **lengths})


def _causal_matrix(extra: dict) -> tuple[EngineSetup, ...]:
    """AR and MTP: a small token budget with few sequences, a large budget with many, and long prompts."""
    small = (_warmup(6000), _loop(8, 16), _loop(64, 96), *_open(((3, 24), (6, 36), (10, 60)), **MIXED), *_open(((6, 36),), cv=3.0, **MIXED))
    large = (_warmup(6000), _loop(16, 32), _loop(128, 192), *_open(((3, 24), (8, 48), (14, 84)), **MIXED), *_open(((8, 48),), cv=3.0, **MIXED))
    long = (_warmup(8192), Load("closed-c4-8k", n=8, concurrency=4, **LONG), Load("closed-c16-8k", n=24, concurrency=16, **LONG),
            *_open(((1, 16), (2, 20), (4, 32)), **LONG_MIXED), *_open(((2, 20),), cv=3.0, **LONG_MIXED))
    return (EngineSetup("b2048-s64", small, {**extra, "max_num_batched_tokens": 2048, "max_num_seqs": 64}, ("poisson-r6",), anchor="closed-c8"),
            EngineSetup("b16384-s256", large, {**extra, "max_num_batched_tokens": 16384, "max_num_seqs": 256}, ("poisson-r8",), anchor="closed-c16"),
            EngineSetup("long8k", long, {**extra, "max_model_len": LONG_CONTEXT}, ("poisson-r2",), anchor="closed-c4-8k"))


CAUSAL_MATRIX = _causal_matrix({})
_DRAFTS = (_warmup(6000), _loop(4, 8), _loop(32, 64), *_open(((3, 24), (6, 36), (10, 60)), **MIXED), *_open(((6, 36),), cv=3.0, **MIXED))
ASSISTED_MATRIX = (*(EngineSetup(f"k{k}-a{a:g}", _DRAFTS, {"num_speculative_tokens": k, "acceptance": a}, ("poisson-r6",), anchor="closed-c4")
                     for k, a in ((2, 0.6), (5, 0.9))),
                   _causal_matrix({"num_speculative_tokens": 4, "acceptance": 0.8})[0])
CANVAS_MATRIX = (
    EngineSetup("steps24-s4", (_warmup(6000), _loop(1, 3), _loop(4, 8), *_open(((0.5, 12), (1, 16), (2, 20)), **MIXED),
                               *_open(((1, 16),), cv=3.0, **MIXED)),
                {"max_denoising_steps": 24, "max_num_seqs": 4}, ("poisson-r1",), anchor="closed-c4"),
    EngineSetup("steps24-s12", (_warmup(6000), _loop(4, 8), _loop(12, 24), *_open(((1, 16), (2.5, 25), (4, 40)), **MIXED),
                                *_open(((2.5, 25),), cv=3.0, **MIXED)),
                {"max_denoising_steps": 24, "max_num_seqs": 12}, ("poisson-r2.5",), anchor="closed-c4"),
    EngineSetup("steps48-s8-long", (_warmup(8192), Load("closed-c2-8k", n=4, concurrency=2, **LONG), _loop(8, 16, output_tokens=(64, 2048)),
                                    *_open(((0.5, 12), (1, 16), (1.5, 20)), prompt_tokens=(64, 8192), output_tokens=(64, 2048))),
                {"max_denoising_steps": 48, "max_num_seqs": 8, "max_num_batched_tokens": 4096, "max_model_len": LONG_CONTEXT},
                ("poisson-r1",), anchor="closed-c8"))

CAUSAL = (*CAUSAL, *CAUSAL_MATRIX)
ASSISTED = (*ASSISTED, *ASSISTED_MATRIX)
CANVAS = (*CANVAS, *CANVAS_MATRIX)


def design_for(mode) -> tuple[EngineSetup, ...]:
    """The engine setups of a serving mode (costmodel.modes.ServingMode), chosen by what it runs:
    canvases (DiffusionGemma), an assistant drafting (MTP), or plain decoding."""
    return CANVAS if mode.decodes_canvases else ASSISTED if mode.assistant else CAUSAL


def setup_of(mode, label: str) -> EngineSetup:
    for s in design_for(mode):
        if s.label == label:
            return s
    raise KeyError(label)


def design_setup(sdir: Path) -> EngineSetup:
    """The calibration design's setup a recorded setup directory ran (its roles: fit, check, warm-up),
    as a run cut short is scored (EngineSetup.as_recorded)."""
    run = load_run(sdir)
    try:
        setup = setup_of(run.manifest.serving, str(run.manifest.engine.get("setup") or sdir.name))
    except KeyError:
        raise UserError(f"{sdir}: engine setup {sdir.name!r} is not in the calibration design (measure/vllm/gpu_design.py)",
                        "record it with scripts/gpu_engine.sh, or add the setup to the design") from None
    loads = loads_json(sdir)
    return setup.as_recorded({ld["name"] for ld in loads if not ld.get("skipped")},
                             {ld["name"] for ld in loads if ld.get("skipped") in ("deadline", "budget")})
