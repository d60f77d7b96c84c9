"""`costmodel measure`: one command, three backends. With --engine vllm it records a real vLLM
engine on this machine (measure/vllm); otherwise, without --endpoint, it drives transformers' own
models in-process on the local GPU (measure/harness); with --endpoint URL it load-tests a live
OpenAI-compatible deployment (measure/endpoint). Each backend contributes its own options; the
command parses them into `MeasureOptions` and calls `measure.backends.run_measure`, which checks them."""

from __future__ import annotations

import click
from click.core import ParameterSource

from measure.cli.measure_endpoint import OPTIONS as ENDPOINT_OPTIONS
from measure.cli.measure_harness import OPTIONS as HARNESS_OPTIONS
from measure.cli.measure_vllm import GPU_PARAMS as VLLM_GPU_PARAMS
from measure.cli.measure_vllm import OPTIONS as VLLM_OPTIONS
from measure.cli.measure_vllm import reject_vllm_options
from costmodel.errors import UserError
from measure.cli.measure_vllm import run as run_vllm_cli
from costmodel.modes import mode_names
from measure.backends import MeasureOptions, run_measure
from measure.endpoint.loadtest import LoadTestOptions
from measure.harness.config import HarnessOptions

COMMON = [
    click.option("--model", "model", default=None, help="In-process: catalog name, checkpoint path or hub id. Endpoint: the served model name."),
    click.option("--mode", type=click.Choice(mode_names()), default=None, help="Generation mode (default: from --model)."),
    click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True, help="Run directory to write."),
    click.option("--resume", is_flag=True, help="Continue an interrupted run in --out, skipping finished units."),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--endpoint", default=None, help="Base URL of an OpenAI-compatible server; switches to the endpoint backend."),
]

# --engine vllm on a GPU (measure/cli/measure_vllm.py run_gpu reads them)
VLLM_GPU_OPTIONS = [
    click.option("--precision", default=None, help="--engine vllm on a GPU: the weights' precision, fp8 | bf16 [default fp8]."),
    click.option("--budget-s", type=float, default=None,
                 help="--engine vllm on a GPU: seconds of loads the design may take, engine start-ups (30-330 s each) not counted [default: the whole design]."),
    click.option("--gpus", default=None, help="--engine vllm on a GPU: comma list of GPU indices; the design's setups run in parallel, one engine per GPU."),
    click.option("--setups", default=None, help="--engine vllm on a GPU: comma list of the design's engine setups to run [default: all]."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


def given_options(ctx: click.Context | None) -> dict[str, str]:
    """The options given on the command line or by the environment (defaults are not "given"): parameter name -> flag."""
    if ctx is None:
        return {}
    return {p.name: (p.opts[0] if getattr(p, "opts", None) else p.name) for p in ctx.command.params
            if ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}


def _measure(**opts):
    """Record a real vLLM engine (--engine vllm), run transformers' own models (--engine
    eager|compiled, the default), or load-test a live endpoint.

    \b
    vLLM:     costmodel measure --engine vllm --mode ar -o runs/vllm-ar   then: costmodel fit runs/vllm-ar/*/ --behaviour prior -o vllm.json
    GPU:      costmodel measure --model diffusiongemma-26b-a4b --random-weights -o runs/h200-dg
    Endpoint: costmodel measure --endpoint http://localhost:8000 --model google/diffusiongemma-26B-A4B-it --qps 2 -o runs/live
    """
    given = given_options(click.get_current_context(silent=True))
    if not opts.get("endpoint") and opts.get("engine") == "vllm":
        return run_vllm_cli(opts, given)
    reject_vllm_options(given)
    for name, flag in given.items():
        if name in VLLM_GPU_PARAMS:
            raise UserError(f"{flag} is an option of --engine vllm on a GPU", f"drop {flag}, or use --engine vllm")
    return run_measure(MeasureOptions(HarnessOptions.from_values(opts), LoadTestOptions.from_values(opts), given))


measure = click.command(name="measure")(_apply(COMMON + HARNESS_OPTIONS + VLLM_OPTIONS + VLLM_GPU_OPTIONS + ENDPOINT_OPTIONS, _measure))
