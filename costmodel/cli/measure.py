"""`costmodel measure`: one command, two backends. Without --endpoint it drives the model
in-process on the local GPU (measure/harness); with --endpoint URL it load-tests a live
OpenAI-compatible deployment (measure/endpoint). Each backend contributes its own options."""

from __future__ import annotations

import click

from measure.endpoint.loadtest import OPTIONS as ENDPOINT_OPTIONS, reject_endpoint_options, run as run_endpoint
from costmodel.cli.measure_harness import OPTIONS as HARNESS_OPTIONS, run as run_harness

COMMON = [
    click.option("--model", "model", default=None, help="In-process: catalog name, checkpoint path or hub id. Endpoint: the served model name."),
    click.option("--mode", type=click.Choice(["diffusion", "ar", "mtp"]), default=None, help="Generation mode (default: from --model)."),
    click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True, help="Run directory to write."),
    click.option("--resume", is_flag=True, help="Continue an interrupted run in --out, skipping finished units."),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--endpoint", default=None, help="Base URL of an OpenAI-compatible server; switches to the endpoint backend."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


def _measure(**opts):
    """Time passes and record commits on the local GPU, or load-test a live endpoint.

    \b
    GPU:      costmodel measure --model diffusiongemma-26b-a4b --random-weights -o runs/h200-dg
    Endpoint: costmodel measure --endpoint http://localhost:8000 --model google/diffusiongemma-26B-A4B-it --qps 2 -o runs/live
    """
    if opts.get("endpoint"):
        return run_endpoint(opts)
    reject_endpoint_options()  # e.g. --qps without --endpoint: refused, never silently ignored
    return run_harness(opts)


measure = click.command(name="measure")(_apply(COMMON + HARNESS_OPTIONS + ENDPOINT_OPTIONS, _measure))
