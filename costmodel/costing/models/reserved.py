"""Reserved / committed-use rental: the on-demand price less the term's discount, paid for every
hour of the term whether used or not; `upfront_share` of the commitment is paid at the start (the
effective hourly rate is the same, the cash flow is not)."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.costing.models.base import PricingModel, Rate
from costmodel.costing.terms import HOURS_PER_YEAR


@dataclass(frozen=True)
class Reserved(PricingModel):
    years: int = 1

    @property
    def name(self) -> str:
        return f"reserved-{self.years}y"

    @property
    def label(self) -> str:
        return f"reserved {self.years} y"

    @property
    def description(self) -> str:
        return f"{self.years}-year committed-use rental: on-demand x (1 - reserved_{self.years}y_discount), upfront_share paid at the start"

    @property
    def terms(self) -> tuple[str, ...]:
        return (f"reserved_{self.years}y_discount", "upfront_share")

    def rate(self, spec, on_demand_usd, on_demand_source, terms, purchase_usd, purchase_source, amortisation_years) -> Rate:
        discount, share = terms[self.terms[0]], terms["upfront_share"]
        hourly = on_demand_usd * (1.0 - discount)
        upfront = share * hourly * self.years * HOURS_PER_YEAR
        src = f"on-demand ${on_demand_usd:g} ({on_demand_source}) x (1 - {terms.cite(self.terms[0])}); {terms.cite('upfront_share')}"
        return Rate(hourly, src, upfront_usd_per_gpu=upfront, term_years=float(self.years))
