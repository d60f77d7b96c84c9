"""Helpers shared by the harness tests (no tests here): run the harness's click options in-process (the same option
list `costmodel measure` composes) and build tiny models on the CPU."""

from __future__ import annotations

import click

COMMON = [
    click.option("--model", "model", default=None),
    click.option("--mode", default=None),
    click.option("-o", "--out", "out", required=True),
    click.option("--resume", is_flag=True),
    click.option("--seed", type=int, default=0),
    click.option("--endpoint", default=None),
]


def harness_command():
    from measure.harness.options import OPTIONS, run

    def measure(**opts):
        return run(opts)

    for opt in reversed(COMMON + OPTIONS):
        measure = opt(measure)
    return click.command()(measure)


def run_harness(*args: str) -> int:
    """Parse `args` like `costmodel measure` and run the harness (UserError propagates)."""
    import os

    os.environ.setdefault("COSTMODEL_NO_PROGRESS", "1")
    return harness_command().main(list(args), standalone_mode=False)


def tiny(name: str):
    import torch

    from costmodel.models import MODELS
    from measure.harness.build import build_random

    torch.manual_seed(0)
    return build_random(MODELS[name], "cpu", "grouped_mm", dtype=torch.float32)
