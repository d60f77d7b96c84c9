"""The pricing options `plan`, `simulate`, `sweep` and `report` share: the decorator adds them and
hands the command one `pricing_options: costmodel.costing.PricingOptions` argument instead.

Declaring and receiving them loads no pricing model: a command given none (a one-request `simulate`)
never imports the price path; `--pricing`'s help names the registered models when help is shown."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click

from costmodel.costing.options import PricingOptions

if TYPE_CHECKING:
    from rich.table import Table

    from costmodel.costing import PricingConfig

OPTIONS = ("price", "onprem", "purchase_usd", "electricity_usd_per_kwh", "amortisation_years", "pue", "telemetry", "pricing", "term", "price_file")
PRICING_HELP = "Pricing model: {models} (default on-demand; terms and sources in costmodel/data/hardware.json)."


class PricingModelOption(click.Option):
    """--pricing: its help lists the pricing models registered (costmodel/costing/models/) when it is shown."""

    def get_help_record(self, ctx):
        from costmodel.costing import model_names

        self.help = PRICING_HELP.format(models=", ".join(model_names()))
        return super().get_help_record(ctx)


def pricing_options(f):
    """Adds the pricing options; the command receives them as `pricing_options` (a PricingOptions)."""
    opts = [
        click.option("--pricing", cls=PricingModelOption, default=None, metavar="MODEL"),
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


def cost_table(rows: list[dict], spec, pricing: PricingConfig) -> Table:
    """What each simulated point costs under `pricing` (simulate --pricing ...): unstable points' costs left blank."""
    from rich.table import Table  # where a cost table is printed: declaring the options loads no rich

    from costmodel.costing import cost_of_row, gpu_price

    pricing.check_hardware([spec.id])
    price = gpu_price(spec, pricing)
    t = Table(title=f"Cost on {spec.id}, {pricing.model} pricing (${price.rate_usd_per_gpu_hour:,.3f} per GPU-hour before electricity)")
    for c in ("mode", "QPS", "replicas", "USD/month", "USD/year", "USD/1M out tok", "break-even USD/1M in", "break-even USD/1M out"):
        t.add_column(c, justify="left" if c == "mode" else "right")
    for r in rows:
        c = cost_of_row(r, price)
        ok = bool(r.get("stable", True))
        money = [f"{c.cost_usd_per_month:,.0f}", f"{c.cost_usd_per_year:,.0f}"]
        per = [f"{x:,.3f}" if ok and x == x else "unstable" if not ok else "" for x in
               (c.cost_usd_per_mtok_output, c.breakeven_usd_per_mtok_input, c.breakeven_usd_per_mtok_output)]
        t.add_row(str(r["mode"]), f"{r['qps']:g}", str(int(r["replicas"])), *money, *per)
    t.caption = "re-price a written directory with `costmodel report DIR -o out.html --pricing MODEL`"
    return t
