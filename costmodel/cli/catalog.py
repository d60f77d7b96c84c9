"""`costmodel hardware` and `costmodel models`: what the catalogs hold, with sources."""

from __future__ import annotations

import json

import click
from rich.table import Table

from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.hardware import catalog, detect_local, load_user_hardware, source_text, template as hardware_template
from costmodel.models import MODELS


@click.command()
@click.option("--detect", is_flag=True, help="Detect the local GPU through NVML and map it to an entry.")
@click.option("--hardware-file", type=click.Path(), default=None, help="Also list GPUs described in this JSON file.")
@click.option("--template", is_flag=True, help="Print a complete catalog entry (architecture included) for a GPU the catalog lacks.")
def hardware(detect, hardware_file, template):
    """List the GPU catalog (dense TFLOP/s, bandwidth, power, price, each with a source)."""
    con = make_console()
    if template:
        click.echo(json.dumps(hardware_template(), indent=2))
        return
    if detect:
        name, spec = detect_local()
        if spec is None:
            raise UserError(f"local GPU {name!r} is not in the catalog", "describe it in a JSON file (costmodel hardware --template) and pass --hardware-file")
        con.print(f"local GPU {name!r} -> {spec.id} ({spec.arch.name})")
        return
    specs = catalog()
    if hardware_file:
        specs.update(load_user_hardware(hardware_file))
    t = Table(title="GPU catalog (dense tensor rates)")
    for c in ["id", "name", "architecture", "memory GB", "TB/s", "TFLOP/s", "power W", "$/GPU-h"]:
        t.add_column(c)
    for s in specs.values():
        t.add_row(s.id, s.name, s.arch.name + (" (assumed)" if s.arch_assumed else ""), f"{s.memory_gb:g}", f"{s.memory_bandwidth_tbps:g}", ", ".join(f"{k} {v:g}" for k, v in s.tflops.items()),
                  f"{s.board_power_w:g}", f"{s.price_usd_per_gpu_hour:.2f}")
    con.print(t)
    keys = sorted({v for s in specs.values() for v in s.sources.values()})
    for k in keys:
        con.print(f"[dim]{k}: {source_text(k)}[/dim]")


@click.command()
def models():
    """List model shapes: parameters (total / active per token), KV bytes per token, source."""
    t = Table(title="Model shapes")
    for c in ["name", "family", "params B", "active B", "KV KiB/token (bf16)", "source"]:
        t.add_column(c)
    for m in MODELS.values():
        t.add_row(m.name, m.family, f"{m.total_params / 1e9:.3f}", f"{m.active_params_per_token / 1e9:.3f}",
                  f"{m.kv_bytes_per_token(2) / 1024:.1f}", m.source[:70])
    make_console().print(t)
