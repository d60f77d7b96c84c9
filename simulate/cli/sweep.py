"""`costmodel sweep`: a spec file -> simulate.sweep.spec.SweepSpec -> simulate.sweep.run.run_sweep; a progress bar
of points done / total, then where the table is."""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from costmodel.cli.pricing_options import pricing_options
from costmodel.console import make_console
from costmodel.costing import PricingConfig, pricing_config
from simulate.parallel import Workers
from simulate.sweep.run import run_sweep
from simulate.sweep.pricing import point_pricing, with_pricing
from simulate.sweep.spec import MAX_POINTS, load_spec


@contextmanager
def points_bar(err):
    """A `progress(done, total)` callback drawing points done / total on stderr (none with COSTMODEL_NO_PROGRESS)."""
    if os.environ.get("COSTMODEL_NO_PROGRESS"):
        yield None
        return
    if not err.is_terminal:  # a log file or a pipe: a plain line now and then instead of a bar nobody sees
        yield progress_lines(err.file)
        return
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task("", total=None)
        yield lambda done, total: bar.update(task, total=total, completed=done)


def progress_lines(stream, every_s: float = 10.0):
    """A `progress(done, total)` callback writing "sweep: 120/1,000 points (12%), 35 s" at most every
    `every_s` seconds, at each tenth of the points, and at the end."""
    t0, last = time.perf_counter(), {"t": -math.inf, "tenth": -1}

    def progress(done, total):
        now, tenth = time.perf_counter(), (10 * done // total if total else 10)
        if done < total and now - last["t"] < every_s and tenth == last["tenth"]:
            return
        last.update(t=now, tenth=tenth)
        print(f"sweep: {done:,}/{total:,} points ({100 * done / max(total, 1):.0f}%), {now - t0:.0f} s", file=stream, flush=True)

    return progress


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True,
              help="Directory: points/<id>.json as points finish, then results.parquet, results.csv and its dictionary.")
@click.option("--jobs", type=int, default=None, help="Local Dask worker processes (default: the CPUs available; 1 runs serially with no Dask).")
@click.option("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://HOST:8786 (default: $DASK_SCHEDULER_ADDRESS, else a local cluster).")
@click.option("--max-points", type=click.IntRange(min=1), default=MAX_POINTS, show_default=True,
              help="Refuse a spec with more points than this (a typo in a grid multiplies it); raise it to run a bigger sweep.")
@pricing_options
def sweep(spec, out, jobs, scheduler, max_points, pricing_options):
    """Run every point of a sweep SPEC (YAML or JSON: kind simulate|plan, base, grid, points; see
    docs/sweeps.md). Re-running skips the points already in -o; Ctrl-C keeps every finished point.

    \b
    costmodel sweep examples.yaml -o out/sweep
    costmodel sweep big.yaml -o out/big --scheduler tcp://10.0.0.5:8786
    """
    t0 = time.perf_counter()
    base = pricing_config(pricing_options)
    s = with_pricing(load_spec(spec, max_points), base)  # the cost columns' pricing: every point's default
    for p in s.points:
        point_pricing(p.params, base or PricingConfig())  # a bad model or price fails before any simulation
    con = make_console()
    with points_bar(make_console(stderr=True)) as progress:
        outcome = run_sweep(s, out, Workers(scheduler, jobs), progress)
    wall = time.perf_counter() - t0
    con.print(f"{len(s.points)} points ({s.kind}): {outcome.ran} run, {outcome.skipped} already done; {wall:.1f} s wall"
              + (f", {outcome.ran / wall:.1f} points/s" if outcome.ran else ""))
    con.print("wrote " + ", ".join(str(p) for p in outcome.written))
