"""The pricing options `plan` and `report` share, parsed into simulate.plan.pricing.PricingOptions."""

from __future__ import annotations

import click

from simulate.plan.pricing import PricingOptions


def pricing_options(f):
    """The pricing options shared by plan and report."""
    opts = [
        click.option("--price", multiple=True, metavar="GPU=USD", help="Cloud rental per GPU-hour, overriding the catalog (repeatable or comma-separated), e.g. --price h200=3.50."),
        click.option("--onprem", is_flag=True, help="Price owned GPUs: purchase price amortised over --amortisation-years, plus electricity."),
        click.option("--purchase-usd", multiple=True, metavar="GPU=USD", help="[--onprem] purchase price per GPU, overriding the catalog, e.g. --purchase-usd h200=30000."),
        click.option("--electricity-usd-per-kwh", type=float, default=None, help="[--onprem] electricity price (default 0.08, aiinframap.com TCO tool)."),
        click.option("--amortisation-years", type=float, default=None, help="[--onprem] straight-line write-off period (default 4)."),
        click.option("--pue", type=float, default=None, help="Facility power / IT power for energy and on-prem electricity (default 1.2; industry average 1.58)."),
        click.option("--telemetry", multiple=True, type=click.Path(), metavar="RUN",
                     help="A measured run directory: its telemetry's mean busy power_w replaces the board power for its GPU."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def pricing_options_of(price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry) -> PricingOptions:
    return PricingOptions(tuple(price), onprem, tuple(purchase_usd), electricity_usd_per_kwh, amortisation_years, pue, tuple(telemetry))
