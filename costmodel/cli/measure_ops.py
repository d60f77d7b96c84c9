"""`costmodel measure --engine ops` options: the operator campaign on the local GPU (measure/ops/run.py).
Torch-free at import time, so `costmodel measure --help` works without the measure extra."""

from __future__ import annotations

import click

from costmodel.errors import UserError
from measure.ops.grids import LEVELS
from measure.ops.run import DEFAULT_BUDGET_S, OpsOptions, run_ops

OPTIONS = [
    click.option("--precision", default=None, help="--engine ops: weight precision of the GPU's kernels, bf16 | fp8 | int4 (what its architecture runs) [default bf16]."),
    click.option("--budget-s", type=float, default=None,
                 help=f"--engine ops: seconds the campaign may take; a smaller budget times a coarser grid and says what it dropped [default {DEFAULT_BUDGET_S:g}]."),
    click.option("--hardware", default=None, help="--engine ops: catalog id of the local GPU (default: matched by its NVML name)."),
    click.option("--hardware-file", type=click.Path(dir_okay=False), default=None, help="--engine ops: JSON file describing a GPU the catalog lacks (costmodel hardware --template)."),
    click.option("--density", type=click.Choice(LEVELS), default=None, help="--engine ops: time this grid density instead of the one the budget allows."),
    click.option("--ops-families", default=None, help="--engine ops: comma list of op families to time (development; the profile needs them all)."),
    click.option("--kernel-set", "kernel_set", default=None,
                 help="--engine ops: time a shipped kernel set by name instead of the GPU architecture's (e.g. vllm: vLLM's own MoE kernel, "
                      "lifted from the vllm package; with --ops-families moe)."),
    click.option("--autotune", is_flag=True, help="--engine ops: time every candidate kernel, not the kernel set's choices (to refresh a set after adding a kernel)."),
]
PARAMS = frozenset({"precision", "budget_s", "hardware", "hardware_file", "density", "ops_families", "autotune", "kernel_set"})
NEUTRAL = frozenset({"out", "resume", "device", "seed", "engine"})


def engine_of(opts: dict, given: dict[str, str]) -> str:
    """--engine as given, else ops (the GPU default) unless an option of transformers' harness was given (then eager)."""
    if opts.get("engine"):
        return opts["engine"]
    harness = [n for n in given if n not in PARAMS and n not in NEUTRAL]
    return "eager" if harness else "ops"


def reject_ops_options(given: dict[str, str]) -> None:
    """For the transformers harness or an endpoint: an --engine ops option given there is refused."""
    for name, flag in given.items():
        if name in PARAMS:
            raise UserError(f"{flag} is an option of --engine ops", f"drop {flag}, or use --engine ops")


def run(opts: dict, given: dict[str, str]) -> int:
    """Run the operator campaign with the parsed options; options of other backends are refused."""
    for name, flag in given.items():
        if name not in PARAMS and name not in NEUTRAL:
            raise UserError(f"{flag} is not an option of --engine ops (it times every op of the three models' passes)",
                            f"drop {flag}, or use --engine eager|compiled for transformers' own models")
    fams = [f.strip() for f in (opts.get("ops_families") or "").split(",") if f.strip()]
    return run_ops(OpsOptions(out=opts["out"], precision=opts.get("precision") or "bf16", budget_s=opts.get("budget_s"), resume=bool(opts.get("resume")),
                              hardware=opts.get("hardware"), hardware_file=opts.get("hardware_file"), device=opts.get("device"),
                              grid=opts.get("density"), families=fams, autotune=bool(opts.get("autotune")),
                              kernel_set=opts.get("kernel_set")))
