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
                             {ld["name"] for ld in loads if ld.get("skipped") == "deadline"})
