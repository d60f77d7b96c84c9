"""Cost of one simulated point (mode, hardware, QPS, replicas): GPUs, $/hour, $/month (730 h),
$/year, the upfront payment of a commitment or purchase, $ per 1M output / total tokens, the
break-even price per 1M input and per 1M output tokens (the cost split the way API price sheets
quote it, output tokens at `output_input_price_ratio` x input tokens), $ per 1k requests and facility
kWh per 1M output tokens.

Per-token and per-request figures divide the hourly cost by what the point actually served
(`output_tokens_per_s`, `total_tokens_per_s`, `throughput_rps`), so an overloaded (unstable) point
is priced on its completions, not on the offered load; such a point never meets an SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from costmodel.costing.pricing import HOURS_PER_MONTH, GpuPrice
from costmodel.costing.terms import HOURS_PER_YEAR

if TYPE_CHECKING:
    import pandas as pd

GPUS_PER_REPLICA = 1  # every shipped configuration serves one model replica per GPU (int4 on the 32 GB RTX 5090)

COST_COLUMNS = (
    "pricing_basis", "gpus_per_replica", "gpus", "rate_usd_per_gpu_hour", "power_w_per_gpu", "electricity_usd_per_gpu_hour",
    "cost_usd_per_hour", "cost_usd_per_month", "cost_usd_per_mtok_output", "cost_usd_per_mtok_total", "cost_usd_per_1k_requests",
    "facility_power_kw", "energy_kwh_per_mtok_output", "price_source", "power_source",
    "cost_usd_per_year", "upfront_usd", "breakeven_usd_per_mtok_input", "breakeven_usd_per_mtok_output",
)


@dataclass(frozen=True)
class PointCost:
    pricing_basis: str
    gpus_per_replica: int
    gpus: int
    rate_usd_per_gpu_hour: float
    power_w_per_gpu: float
    electricity_usd_per_gpu_hour: float
    cost_usd_per_hour: float
    cost_usd_per_month: float
    cost_usd_per_mtok_output: float
    cost_usd_per_mtok_total: float
    cost_usd_per_1k_requests: float
    facility_power_kw: float
    energy_kwh_per_mtok_output: float
    price_source: str
    power_source: str
    cost_usd_per_year: float
    upfront_usd: float
    breakeven_usd_per_mtok_input: float
    breakeven_usd_per_mtok_output: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)  # scalar fields in order: asdict's deep copy cost ~100 us a point


def _per(hourly: float, per_second: float, unit: float) -> float:
    """`hourly` spread over `unit` items when `per_second` items are served each second (NaN if none)."""
    if not per_second or per_second <= 0 or not math.isfinite(per_second):
        return math.nan
    return hourly / (per_second * 3600.0) * unit


def point_cost(replicas: int, busy_frac: float, throughput_rps: float, output_tokens_per_s: float, total_tokens_per_s: float,
               price: GpuPrice, gpus_per_replica: int = GPUS_PER_REPLICA) -> PointCost:
    """Cost of `replicas` replicas of `gpus_per_replica` GPUs each, busy `busy_frac` of the time."""
    gpus = int(replicas) * gpus_per_replica
    busy = 0.0 if busy_frac is None or not math.isfinite(busy_frac) else float(busy_frac)
    per_gpu = price.usd_per_gpu_hour(busy)
    hourly = gpus * per_gpu
    power = price.power_w(busy)
    facility_kw = gpus * (power + price.host_power_w_per_gpu) * price.pue / 1000.0
    ratio = price.output_input_price_ratio
    input_tps = max(float(total_tokens_per_s or 0.0) - float(output_tokens_per_s or 0.0), 0.0)
    per_mtok_input = _per(hourly, input_tps + ratio * float(output_tokens_per_s or 0.0), 1e6)
    return PointCost(
        pricing_basis=price.basis,
        gpus_per_replica=gpus_per_replica,
        gpus=gpus,
        rate_usd_per_gpu_hour=price.rate_usd_per_gpu_hour,
        power_w_per_gpu=power,
        electricity_usd_per_gpu_hour=price.electricity_usd_per_gpu_hour(busy),
        cost_usd_per_hour=hourly,
        cost_usd_per_month=hourly * HOURS_PER_MONTH,
        cost_usd_per_mtok_output=_per(hourly, output_tokens_per_s, 1e6),
        cost_usd_per_mtok_total=_per(hourly, total_tokens_per_s, 1e6),
        cost_usd_per_1k_requests=_per(hourly, throughput_rps, 1e3),
        facility_power_kw=facility_kw,
        energy_kwh_per_mtok_output=_per(facility_kw, output_tokens_per_s, 1e6),
        price_source=price.rate_source,
        power_source=price.power_source,
        cost_usd_per_year=hourly * HOURS_PER_YEAR,
        upfront_usd=gpus * price.upfront_usd_per_gpu,
        breakeven_usd_per_mtok_input=per_mtok_input,
        breakeven_usd_per_mtok_output=ratio * per_mtok_input,
    )


def cost_of_row(row: dict, price: GpuPrice) -> PointCost:
    """Cost of one flat PointSummary row (`PointSummary.flat()` / a summary.csv row)."""
    return point_cost(int(row["replicas"]), row.get("gpu_busy_frac", 0.0), row.get("throughput_rps", 0.0),
                      row.get("output_tokens_per_s", 0.0), row.get("total_tokens_per_s", 0.0), price)


def add_costs(points: "pd.DataFrame", prices: dict[str, GpuPrice], records: list[dict] | None = None) -> "pd.DataFrame":
    """`points` (flat PointSummary rows) with the COST_COLUMNS appended; `prices` by hardware id; `records`:
    points.to_dict("records") where the caller has them already."""
    import pandas as pd  # the table library, where the table is built: one point's cost (cost_of_row) loads without it (issue 40)

    rows = [cost_of_row(r, prices[r["hardware"]]).to_dict() for r in (points.to_dict("records") if records is None else records)]
    costs = pd.DataFrame(rows, columns=list(COST_COLUMNS), index=points.index)
    return pd.concat([points.drop(columns=[c for c in COST_COLUMNS if c in points.columns]), costs], axis=1)
