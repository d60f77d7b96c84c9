"""`costmodel compare-bench`: a `vllm bench serve --save-result` file's loads simulated on a profile,
predicted vs measured output throughput, TTFT p50/p95 and TPOT p50 (simulate/compare.py)."""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from costmodel import atomic
from costmodel.console import make_console
from costmodel.engine_settings import EngineSettings
from costmodel.errors import UserError
from costmodel.modes import mode_names
from costmodel.options import parse_modes
from simulate.batch import DEFAULT_HARDWARE
from simulate.compare import METRICS, CompareBenchConfig, compare_bench


@click.command(name="compare-bench")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--hardware", default=None, help=f"GPU of the shipped default profile [default: {DEFAULT_HARDWARE}].")
@click.option("--profile", "profile_path", default=None, help="Profile JSON instead of the shipped one.")
@click.option("--mode", default=None, help=f"Serving mode, one of {', '.join(mode_names())} [default: the file's: diffusion_* counters, "
                                           "spec_decode_*, a transcribed server's settings, the model name; a file they leave open "
                                           "(AR or MTP) is refused, asking for --mode].")
@click.option("--max-num-seqs", type=click.IntRange(min=1), default=None, help="The server's --max-num-seqs [default: the file's, the profile's, vLLM's].")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=None, help="The server's token budget per step.")
@click.option("--max-denoising-steps", type=click.IntRange(min=1), default=None, help="Diffusion: the server's max_denoising_steps.")
@click.option("--canvas-length", type=click.IntRange(min=1), default=None, help="Diffusion: the server's canvas [default: the file's counters].")
@click.option("--num-speculative-tokens", type=click.IntRange(min=1), default=None, help="MTP: the server's k [default: the file's counters].")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the simulation's draws (and of a rate's arrival gaps).")
@click.option("--csv", "csv_path", default=None, type=click.Path(dir_okay=False), help="Also write one row per load (predicted, measured, error per figure).")
def compare_bench_cmd(files, hardware, profile_path, mode, max_num_seqs, max_num_batched_tokens, max_denoising_steps, canvas_length,
                      num_speculative_tokens, seed, csv_path):
    """Simulate the loads of `vllm bench serve --save-result` FILES (requests, lengths, request rate,
    burstiness, --max-concurrency) on a profile and print predicted vs measured output tok/s, TTFT
    p50/p95 and TPOT p50, each computed as vllm bench computes it. A FILE may also be a recorded
    engine run (a setup directory of `costmodel measure --engine vllm` on a GPU): its loads, mode and
    engine settings.

    \b
    costmodel compare-bench results/diffusion-c16.json --hardware h200
    costmodel compare-bench data/runs/engine/h200-fp8-ar/default --profile costmodel/data/profiles/h200.json
    costmodel compare-bench run.json --profile my.json --mode mtp --max-num-seqs 64 --csv cmp.csv
    """
    given = {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens, "max_denoising_steps": max_denoising_steps,
             "canvas_length": canvas_length, "num_speculative_tokens": num_speculative_tokens}
    modes = parse_modes(mode) if mode else [None]
    if len(modes) > 1:
        raise UserError(f"--mode {mode} names {len(modes)} modes; a bench file is one server of one mode", "give one, e.g. --mode " + modes[0])
    cfg = CompareBenchConfig(files=list(files), hardware=hardware, profile_path=profile_path, mode=modes[0], engine=EngineSettings.given(given, "CLI"),
                             seed=seed)
    outcome = compare_bench(cfg)
    con = make_console()
    for fc in outcome.files:
        for row in fc.comparisons:
            con.print(f"[bold]{escape(row.load.label)}[/bold]: {escape(row.load.describe())}")
            con.print(table(row))
            for line in notes(row, outcome, fc):
                con.print(escape(line))
            con.print()
    if csv_path:
        import pandas as pd  # only for the optional CSV

        atomic.write_csv(Path(csv_path), pd.DataFrame([{"file": fc.path, **row.flat()} for fc in outcome.files for row in fc.comparisons]))
        con.print(f"wrote {csv_path}")


def _num(x: float, metric: str) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if metric == "tok_s" or x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def table(row) -> Table:
    """Predicted, measured and error per figure; a figure the file lacks says so."""
    t = Table()
    for c in ("figure", "predicted", "measured", "error"):
        t.add_column(c, justify="left" if c == "figure" else "right")
    for k, label in METRICS.items():
        m, p, e = row.measured(k), row.predicted(k), row.error(k)
        t.add_row(label, _num(p, k), _num(m, k) if math.isfinite(m) else "not in file", f"{100 * e:+.1f}%" if math.isfinite(e) else "-")
    return t


def notes(row, outcome, fc) -> list[str]:
    """What was simulated, on what, and why a figure is missing."""
    out = [f"predicted on {outcome.profile.profile_id} ({outcome.profile.hardware.id}), mode {row.mode} ({fc.mode_source}); "
           f"{row.finished} requests simulated over {row.duration_s:,.1f} s; error = predicted / measured - 1"]
    absent = [label for k, label in METRICS.items() if not math.isfinite(row.measured(k))]
    if absent == [METRICS["ttft_p95_ms"]]:
        out.append("TTFT p95: not in the bench file (vllm bench saves percentiles other than the median only when "
                   "--metric-percentiles names them; its default is 99), so not compared")
    elif absent:
        out.append(f"{', '.join(absent)}: not in the bench file, so not compared")
    out += list(row.load.notes) + list(row.notes)
    out.append(f"engine: {row.engine_settings}")
    return out
