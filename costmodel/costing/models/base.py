"""What a pricing model is: how one GPU-hour of a catalog GPU is billed under a set of terms
(catalog values with their sources, or the user's overrides). A model returns a `Rate`; the
electricity of owned GPUs and everything per point (utilisation, throughput) is priced in
costmodel/costing/costs.py, the same for every model."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.hardware import HardwareSpec


@dataclass(frozen=True)
class Rate:
    """One GPU-hour under a model, before electricity."""

    usd_per_gpu_hour: float  # effective hourly rate (an upfront payment spread over its term)
    source: str  # how the rate was derived, with the source of every number in it
    upfront_usd_per_gpu: float = 0.0  # paid at the start of a commitment (reserved) or purchase (on-prem)
    term_years: float = 0.0  # length of that commitment (0: none)
    owned: bool = False  # electricity is billed separately (on-prem); a rental includes it
    host_power_w_per_gpu: float = 0.0  # owned: the host's draw per GPU, always on


@dataclass(frozen=True)
class Terms:
    """Resolved pricing inputs for one GPU: each value with its source text."""

    values: dict  # term name -> float
    sources: dict  # term name -> source text

    def __getitem__(self, name: str) -> float:
        return float(self.values[name])

    def cite(self, *names: str) -> str:
        return "; ".join(f"{n} {self.values[n]:g} ({self.sources[n]})" for n in names)


class PricingModel:
    """Subclass, set the class fields, implement `rate`, and register it in models/__init__.py."""

    name: str = ""  # the --pricing value
    label: str = ""  # short text for tables and charts
    description: str = ""  # one line for --help and the data dictionary
    terms: tuple[str, ...] = ()  # the terms it reads (checked before anything runs)
    owned: bool = False  # the GPUs are bought: electricity is billed per point

    def rate(self, spec: HardwareSpec, on_demand_usd: float, on_demand_source: str, terms: Terms,
             purchase_usd: float | None, purchase_source: str, amortisation_years: float) -> Rate:
        raise NotImplementedError
