"""`costmodel analyze`: the commit-order lens on a measured run (or on any commits + generations
tables of the run-directory schema)."""

from __future__ import annotations

import click
from rich.markup import escape

from measure.analyze.core import SPLITS
from measure.analyze.report import fmt, fmt_ci, provenance_warning
from measure.analyze.study import AnalyzeOptions, run_analysis
from costmodel.console import make_console


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
    r = run_analysis(AnalyzeOptions(out=out, run=run, commits=commits, generations=generations, split=split, bootstrap=bootstrap, seed=seed))
    a, source, paths = r.analysis, r.source, r.paths
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
