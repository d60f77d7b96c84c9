"""On-demand rental: the catalog's hourly price (or --price), no commitment; power is included."""

from __future__ import annotations

from costmodel.costing.models.base import PricingModel, Rate


class OnDemand(PricingModel):
    name = "on-demand"
    label = "on-demand cloud"
    description = "hourly cloud rental, no commitment (catalog price_usd_per_gpu_hour or --price)"

    def rate(self, spec, on_demand_usd, on_demand_source, terms, purchase_usd, purchase_source, amortisation_years) -> Rate:
        return Rate(on_demand_usd, on_demand_source)
