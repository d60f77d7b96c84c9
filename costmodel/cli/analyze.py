"""`costmodel analyze`: the commit-order lens on a measured run (or on any commits + generations
tables of the run-directory schema)."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd
from rich.markup import escape

from costmodel.console import make_console
from costmodel.errors import UserError
from analyze.core import SPLITS, analyze_tables
from analyze.report import Source, fmt, fmt_ci, provenance_warning, write_report
from costmodel.schemas.rundir import load_run


def _read_table(path: str, what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--{what} {p} is not a file", f"give the {what} table as a parquet file")
    try:
        return pd.read_parquet(p)
    except Exception as e:
        raise UserError(f"--{what} {p} is not a readable parquet file ({e.__class__.__name__})",
                        "give the table as parquet (CSV cannot hold its list columns), e.g. a part file of a run directory") from None


def load_inputs(run: str | None, commits: str | None, generations: str | None) -> tuple[pd.DataFrame, pd.DataFrame, Source]:
    """Tables from a run directory, or from two parquet files given instead of it."""
    if run and (commits or generations):
        raise UserError("give either RUN or --commits/--generations, not both", "drop RUN or drop the table files")
    if not run:
        if not (commits and generations):
            raise UserError("no input: give a RUN directory, or both --commits and --generations", "e.g. costmodel analyze runs/h200-dg -o runs/h200-dg-analysis")
        return _read_table(commits, "commits"), _read_table(generations, "generations"), Source(f"{commits} + {generations}")
    r = load_run(run)
    if not r.has("commits"):
        raise UserError(f"run {run} has no commits table (mode {r.manifest.mode}, commit_source {r.manifest.commit_source})",
                        "analyze a diffusion run recorded with the accept_canvas hook")
    if not r.has("generations"):
        raise UserError(f"run {run} has no generations table", "the run is unfinished or not a diffusion generation run; re-measure or resume it")
    return r.table("commits"), r.table("generations"), Source(str(run), r.manifest)


@click.command(name="analyze")
@click.argument("run", required=False, type=str)
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False), help="Directory for the tables and the summary.")
@click.option("--split", default="all", show_default=True, help=f"Which generations: {' | '.join(SPLITS)}.")
@click.option("--bootstrap", default=2000, show_default=True, type=int, help="Prompt-clustered bootstrap resamples for the 95% CIs.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the bootstrap resampling.")
@click.option("--commits", default=None, help="A commits table (parquet) to analyze instead of a RUN directory.")
@click.option("--generations", default=None, help="The generations table (parquet) that goes with --commits.")
def analyze(run, out, split, bootstrap, seed, commits, generations):
    """Commit-order analysis of a measured run: tie-aware tau_b with prompt-clustered CIs, the bin
    sweep, the block-sequential control, commit rates, re-noising, confidence vs correctness, each
    on content positions only and per regime.

    \b
    costmodel analyze runs/h200-dg -o runs/h200-dg-analysis
    costmodel analyze --commits c.parquet --generations g.parquet -o out --split confirmatory
    """
    if split not in SPLITS:
        raise UserError(f"--split {split!r} is not a split", f"use one of {', '.join(SPLITS)}")
    if bootstrap < 1:
        raise UserError(f"--bootstrap {bootstrap} is below 1", "give the number of prompt resamples, e.g. --bootstrap 2000")
    c, g, source = load_inputs(run, commits, generations)
    a = analyze_tables(c, g, split=split, bootstrap=bootstrap, seed=seed)
    paths = write_report(a, out, source)
    console = make_console()
    warning = provenance_warning(source)
    if warning:
        console.print(f"[bold red]WARNING[/]: {escape(warning)}", highlight=False)
    for x in a.regimes.itertuples():
        console.print(f"{x.regime}: tau_b content {fmt_ci(x.tau_b_content_mean, x.tau_b_content_ci_lo, x.tau_b_content_ci_hi)}, raw {fmt(x.tau_b_raw_canvas_mean)}, "
                      f"control {fmt(x.tau_b_block_seq_control_mean)}, tokens/call {fmt(x.tokens_per_accept_call_mean, 1)}, "
                      f"same-call {fmt(x.same_call_pair_frac_mean, 2)} ({x.generations} generations)", highlight=False, markup=False)
    console.print(f"wrote {len(paths)} files to {out} (summary.md, summary.html)", highlight=False, markup=False)
    return 0
