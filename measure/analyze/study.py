"""`costmodel analyze`'s API: `AnalyzeOptions` -> `run_analysis`: read the commits and generations
tables (a run directory, or two parquet files), analyse them, write the tables and the summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from measure.analyze.core import Analysis, analyze_tables, check_settings
from measure.analyze.report import Source, write_report
from costmodel.errors import UserError
from costmodel.schemas.rundir import check_part, check_unique, load_run


@dataclass
class AnalyzeOptions:
    out: str
    run: str | None = None  # a run directory, or
    commits: str | None = None  # a commits table (parquet) with
    generations: str | None = None  # its generations table
    split: str = "all"
    bootstrap: int = 2000
    seed: int = 0


@dataclass
class AnalyzeResult:
    analysis: Analysis
    source: Source
    paths: list  # files written


def _read_table(path: str, what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--{what} {p} is not a file", f"give the {what} table as a parquet file")
    try:
        df = pd.read_parquet(p)
    except Exception as e:
        raise UserError(f"--{what} {p} is not a readable parquet file ({e.__class__.__name__})",
                        "give the table as parquet (CSV cannot hold its list columns), e.g. a part file of a run directory") from None
    check_part(what, p, df, df.columns, p)  # the run-directory schema, as a run's parts are checked (costmodel/schemas/rundir.py)
    check_unique(what, df, [p] * len(df))
    return df


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


def run_analysis(opts: AnalyzeOptions) -> AnalyzeResult:
    """Check the settings, read the inputs, analyse, write the report to opts.out."""
    check_settings(opts.split, opts.bootstrap)
    c, g, source = load_inputs(opts.run, opts.commits, opts.generations)
    a = analyze_tables(c, g, split=opts.split, bootstrap=opts.bootstrap, seed=opts.seed)
    return AnalyzeResult(a, source, write_report(a, opts.out, source))
