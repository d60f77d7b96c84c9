"""`costmodel report`: options -> reports.api.ReportConfig -> make_report."""

from __future__ import annotations

import time
from pathlib import Path

import click

from costmodel import atomic
from costmodel.cli.pricing_options import pricing_options
from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.schemas.day import is_day_dir
from costmodel.costing import pricing_config
from reports.api import FORMATS, ReportConfig, make_report
from reports.day_api import make_day_report


@click.command()
@click.argument("results", type=click.Path())
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="out.csv (finance CSV + out.dictionary.csv/.md) or out.html.")
@click.option("--slo", default=None, help="SLO to judge points by (default: the plan's; for simulate results: stability only).")
@pricing_options
def report(results, out, slo, pricing_options):
    """Export `costmodel plan -o` (with or without --load-curve), `costmodel simulate -o` or `costmodel sweep -o` results as a
    self-contained HTML report (the answer first, interactive charts), a budget workbook (.xlsx,
    totals as formulas of editable prices) or a finance CSV (with its data dictionary).

    Pricing options, when any is given, replace the plan's pricing (the replica counts do not
    depend on price, so the cheapest option and crossover are recomputed without re-simulating).

    \b
    costmodel report out/plan -o out/plan-report.html
    costmodel report out/plan -o out/budget.xlsx --pricing reserved-1y
    costmodel report out/sim -o out/finance.csv --price h200=3.50
    costmodel report out/day -o out/day.html
    """
    t0 = time.perf_counter()
    atomic.check_output(out)
    pricing = pricing_config(pricing_options)
    if is_day_dir(results):  # a `plan --load-curve -o` directory (reports/day_api.py)
        return _day_report(results, out, slo, pricing, t0)
    outcome = make_report(ReportConfig(results, out, slo, pricing))
    con = make_console()
    for note in outcome.notes:
        con.print(f"[yellow]{note}[/yellow]")
    if outcome.analysis.crossover.status != "not-compared":  # only where both DiffusionGemma and AR/MTP were evaluated
        con.print(f"[bold]{outcome.analysis.crossover.text}[/bold]")
    con.print("wrote " + ", ".join(str(p) for p in outcome.written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")


def _day_report(results, out, slo, pricing, t0) -> None:
    if Path(out).suffix.lower() not in FORMATS:
        raise UserError(f"-o {out}: the output must end in .xlsx, .csv or .html", "e.g. -o day.html or -o day.xlsx")
    rep = make_day_report(results, out, pricing, slo)
    con = make_console()
    con.print(f"[bold]{rep.answer.text}[/bold]")
    con.print("wrote " + ", ".join(str(p) for p in rep.written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")
