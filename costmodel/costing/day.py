"""The day's bills under a pricing model (`plan --load-curve --pricing ...`): the cluster layer bills
GPU time at the catalog's on-demand rate; here each fleet's hours and month are re-priced with the
plan's costing (costmodel/costing: the same `gpu_price` as a plan's points).

What is paid for depends on the model, not only on the GPU-hours used:
- a rental by the hour (on-demand, spot): the GPU-hours the fleet held (autoscaling saves);
- a commitment or a purchase (reserved, on-prem: `term_years` > 0 or an owned model): the most GPUs
  the fleet ever held, all day (GPUs committed for the peak are paid for at the trough too), plus,
  when owned, the electricity of the energy used (x PUE) and the hosts' draw.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from costmodel.costing import DAYS_PER_MONTH, GpuPrice, get_model
from costmodel.schemas.day import DAY_H, MonthBill


def committed(price: GpuPrice) -> bool:
    """Whether the model pays for GPUs held whether used or not (a commitment or a purchase)."""
    return price.term_years > 0 or get_model(price.basis).owned


def _cost(price: GpuPrice, billed_gpu_hours: float, energy_kwh: float) -> float:
    usd = billed_gpu_hours * price.rate_usd_per_gpu_hour
    if get_model(price.basis).owned:  # electricity is billed apart from an owned GPU's rate
        usd += (energy_kwh + billed_gpu_hours * price.host_power_w_per_gpu / 1000.0) * price.pue * price.electricity_usd_per_kwh
    return usd


def cost_floor_usd_per_day(price: GpuPrice, gpu_hours_per_day: float, replicas_max: int) -> float:
    """A fleet's day under `price` from its GPU-hours and most replicas alone (energy unpriced): no
    higher than price_bill's, the floor a fleet not simulated is listed with (simulate/plan/day_bounds.py)."""
    return _cost(price, replicas_max * DAY_H if committed(price) else gpu_hours_per_day, 0.0)


def price_bill(bill: MonthBill, price: GpuPrice) -> MonthBill:
    """One fleet's day and month under `price` (a bill with a note has no figures to price; its
    per-day figures are a day's whatever the span: costmodel/schemas/day.py over_a_day)."""
    if bill.note:
        return bill
    billed = bill.replicas_max * DAY_H if committed(price) else bill.gpu_hours_per_day
    day = _cost(price, billed, bill.energy_kwh_per_day)
    low = bill.cost_usd_per_month_low
    if bill.gpu_hours_per_day_low == bill.gpu_hours_per_day_low:  # the low end's fleet, priced alike
        billed_low = bill.replicas_max_low * DAY_H if committed(price) else bill.gpu_hours_per_day_low
        low = min(day, _cost(price, billed_low, bill.energy_kwh_per_day_low)) * DAYS_PER_MONTH
    return replace(bill, cost_usd_per_day=day, cost_usd_per_month=day * DAYS_PER_MONTH, cost_usd_per_month_low=low)


def price_hours(hours: pd.DataFrame, prices: dict[str, GpuPrice]) -> pd.DataFrame:
    """Each hour's cost_usd under its GPU's price (committed models: the fleet's most GPUs all hour)."""
    if hours.empty:
        return hours
    out = hours.copy()
    peak = out.groupby(["hardware", "mode", "policy"]).replicas_max.transform("max")
    for i, r in out.iterrows():
        p = prices.get(r["hardware"])
        if p is None:
            continue
        held = peak[i] * (r["end_s"] - r["start_s"]) / 3600 if committed(p) else r["gpu_hours"]
        out.at[i, "cost_usd"] = _cost(p, held, r["energy_kwh"])
    return out
