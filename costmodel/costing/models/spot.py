"""Spot / preemptible rental with an on-demand fallback: capacity is held `spot_availability` of
the hours at the spot discount; the rest of the hours the same GPUs are rented on demand, so the
fleet (and the SLO) stays whole."""

from __future__ import annotations

from costmodel.costing.models.base import PricingModel, Rate


class Spot(PricingModel):
    name = "spot"
    label = "spot + on-demand fallback"
    description = "spot rental at on-demand x (1 - spot_discount) for spot_availability of the hours, on demand for the rest"
    terms = ("spot_discount", "spot_availability")

    def rate(self, spec, on_demand_usd, on_demand_source, terms, purchase_usd, purchase_source, amortisation_years) -> Rate:
        a, d = terms["spot_availability"], terms["spot_discount"]
        hourly = a * on_demand_usd * (1.0 - d) + (1.0 - a) * on_demand_usd
        src = f"on-demand ${on_demand_usd:g} ({on_demand_source}) x (1 - availability x discount); {terms.cite(*self.terms)}"
        return Rate(hourly, src)
