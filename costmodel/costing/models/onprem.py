"""Owned GPUs: purchase price plus the host server's share per GPU, amortised straight-line over
`amortisation_years` of 8,760 h; electricity (GPU at its utilisation plus the host's draw, times
PUE) is billed per point in costs.py. No network, staff, space or financing."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.costing.models.base import PricingModel, Rate
from costmodel.costing.terms import HOURS_PER_YEAR


class OnPrem(PricingModel):
    name = "onprem"
    label = "on-premises"
    description = "owned: (GPU purchase + host_usd_per_gpu) / (amortisation years x 8,760 h) + (GPU + host power) x PUE x USD/kWh"
    terms = ("host_usd_per_gpu", "host_power_w_per_gpu")
    owned = True

    def rate(self, spec, on_demand_usd, on_demand_source, terms, purchase_usd, purchase_source, amortisation_years) -> Rate:
        if purchase_usd is None:
            raise UserError(f"{spec.id} has no purchase price in the catalog, so it cannot be priced on-premises", f"pass --purchase-usd {spec.id}=USD")
        capex = purchase_usd + terms["host_usd_per_gpu"]
        src = (f"(purchase ${purchase_usd:,.0f} ({purchase_source}) + host ${terms['host_usd_per_gpu']:,.0f} per GPU) / "
               f"({amortisation_years:g} y x 8,760 h); {terms.cite(*self.terms)}")
        return Rate(capex / (amortisation_years * HOURS_PER_YEAR), src, upfront_usd_per_gpu=capex, term_years=amortisation_years, owned=True,
                    host_power_w_per_gpu=terms["host_power_w_per_gpu"])
