"""`costmodel import-bench`: `vllm bench serve --save-result` JSON files -> a run directory."""

from __future__ import annotations

import math

import click

from costmodel.console import make_console
from costmodel.modes import get_mode, mode_names
from measure.endpoint.bench_import import import_files


@click.command(name="import-bench")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True, help="Run directory to write.")
@click.option("--model", default=None, help="Model name (default: the files' model_id).")
@click.option("--mode", type=click.Choice(mode_names()), default=None,
              help="Generation mode (default: diffusion_* fields -> diffusion, spec_decode_* -> mtp, else from the model name, else ar).")
@click.option("--canvas-length", type=click.IntRange(min=1), default=None,
              help="Diffusion canvas length [default: the files' counters (positions / engine steps), else the catalog model's].")
@click.option("--resume", is_flag=True, help="Add to an existing import run, skipping results already imported.")
def import_bench(files, out, model, mode, canvas_length, resume):
    """Import `vllm bench serve --save-result` JSON files as a run (one load per result).

    \b
    Example: costmodel import-bench results/openai-chat-4.0qps-gemma-4-26B-A4B-it-*.json -o runs/bench-mtp
    """
    out, rows = import_files(list(files), out, model, get_mode(mode) if mode else None, canvas_length, resume)
    con = make_console()

    def f(x, nd=1):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"

    for r in rows:
        line = (f"{r['unit']}: {r['completed']} ok, {r['failed']} failed, {f(r['request_throughput_rps'], 2)} req/s, "
                f"TTFT p99 {f(r.get('p99_ttft_ms'))} ms, ITL mean {f(r.get('mean_itl_ms'))} ms")
        if not math.isnan(r.get("sd_mean_acceptance_length", math.nan)):
            line += f", MTP acceptance length {f(r['sd_mean_acceptance_length'], 2)}"
        if not math.isnan(r.get("dg_steps_per_canvas", math.nan)):
            line += f", {f(r['dg_steps_per_canvas'], 2)} steps per canvas"
        con.print(line)
    from costmodel.schemas.rundir import load_run

    man = load_run(out).manifest
    if any("dg_steps_per_canvas" in r for r in rows):
        con.print(f"canvas length {man.settings.get('canvas_length')} ({man.settings.get('canvas_length_source')})")
    for note in man.notes[1:]:
        con.print(f"[yellow]note: {note}[/yellow]")
    con.print(f"wrote {out} ({len(rows)} result(s) imported)")
    return 0
