"""Pricing as a user states it (the plan/simulate/sweep/report options), before any check: a record
of texts and numbers with no dependency, so a command that was given no pricing option never loads
the pricing models, the catalog's terms or the price path (pricing.py checks these in
`pricing_config`; issue 51's start-up)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PricingOptions:
    """Pricing as a user states it (the plan/simulate/sweep/report options): a model name, overrides
    as GPU=USD texts or a price file, term overrides as NAME=VALUE, telemetry run directories;
    `pricing_config` checks them against each other."""

    price: tuple[str, ...] = ()
    onprem: bool = False  # shorthand for pricing="onprem"
    purchase_usd: tuple[str, ...] = ()
    electricity_usd_per_kwh: float | None = None
    amortisation_years: float | None = None
    pue: float | None = None
    telemetry: tuple[str, ...] = ()
    pricing: str | None = None
    term: tuple[str, ...] = ()
    price_file: str | None = None

    def given(self) -> bool:
        return bool(self.price or self.onprem or self.purchase_usd or self.telemetry or self.pricing or self.term or self.price_file) or any(
            x is not None for x in (self.electricity_usd_per_kwh, self.amortisation_years, self.pue))
