"""The pricing options `plan`, `simulate`, `sweep` and `report` share: the decorator adds them and
hands the command one `pricing_options: simulate.plan.costing.PricingOptions` argument instead."""

from __future__ import annotations

import functools

import click

from simulate.plan.costing import PricingOptions, model_names

OPTIONS = ("price", "onprem", "purchase_usd", "electricity_usd_per_kwh", "amortisation_years", "pue", "telemetry", "pricing", "term", "price_file")


def pricing_options(f):
    """Adds the pricing options; the command receives them as `pricing_options` (a PricingOptions)."""
    opts = [
        click.option("--pricing", default=None, metavar="MODEL",
                     help=f"Pricing model: {', '.join(model_names())} (default on-demand; terms and sources in costmodel/data/hardware.json)."),
        click.option("--price", multiple=True, metavar="GPU=USD", help="On-demand rental per GPU-hour, overriding the catalog (repeatable or comma-separated), e.g. --price h200=3.50; reserved and spot discount from it."),
        click.option("--price-file", type=click.Path(dir_okay=False), default=None,
                     help="CSV with columns hardware,price_usd_per_gpu_hour[,purchase_usd]: overrides for several GPUs at once (--price wins)."),
        click.option("--term", multiple=True, metavar="NAME=VALUE",
                     help="A pricing term, overriding the catalog for every GPU, e.g. --term spot_discount=0.6 --term upfront_share=1 (docs/costs.md lists them)."),
        click.option("--onprem", is_flag=True, help="Shorthand for --pricing onprem: purchase + host amortised over --amortisation-years, plus electricity."),
        click.option("--purchase-usd", multiple=True, metavar="GPU=USD", help="[onprem] purchase price per GPU, overriding the catalog, e.g. --purchase-usd h200=30000."),
        click.option("--electricity-usd-per-kwh", type=float, default=None, help="[onprem] electricity price (default 0.08, aiinframap.com TCO tool)."),
        click.option("--amortisation-years", type=float, default=None, help="[onprem] straight-line write-off period (default 4)."),
        click.option("--pue", type=float, default=None, help="Facility power / IT power for energy and on-prem electricity (default 1.2; industry average 1.58)."),
        click.option("--telemetry", multiple=True, type=click.Path(), metavar="RUN",
                     help="A measured run directory: its telemetry's mean busy power_w replaces the board power for its GPU."),
    ]

    @functools.wraps(f)
    def command(*args, **kwargs):
        given = {k: kwargs.pop(k) for k in OPTIONS}
        for k in ("price", "purchase_usd", "telemetry", "term"):
            given[k] = tuple(given[k])
        return f(*args, pricing_options=PricingOptions(**given), **kwargs)

    for o in reversed(opts):
        command = o(command)
    return command
