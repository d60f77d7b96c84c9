"""`costmodel fit`: measure's fit (its options and its half: measure/cli/fit.py writes the profile),
then the simulator's step on the file it wrote where one is needed (pipeline/fit.py)."""

from __future__ import annotations

import click

from costmodel.console import make_console
from measure.cli import fit as measure_fit
from pipeline.fit import finish


@click.command("fit", params=measure_fit.fit.params, help=measure_fit.fit.help, short_help=measure_fit.fit.short_help)
@click.pass_context
def fit(ctx, **options):
    finish(make_console(), ctx.invoke(measure_fit.fit, **options))
