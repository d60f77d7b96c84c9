"""The day's report records (`costmodel plan --load-curve -o DAYDIR`, then `costmodel report DAYDIR`)
beside its answer (the vocabulary's words, costmodel/costing/day_answer.py, which `plan --load-curve`
prints too): the same fleets under every pricing model, and the price-sensitivity table (each GPU's
price at the low and the high end of the range its catalog source quotes, one at a time). The HTML page (reports/day_html.py), the
workbook (reports/day_workbook.py) and the console print these records."""

from __future__ import annotations

import math

import pandas as pd

from costmodel.errors import UserError
from costmodel.hardware import validate_spec
from costmodel.schemas.day import DAY_H, DayRecord, MonthBill, bill_order
from costmodel.costing.day_answer import cheapest as day_cheapest
from costmodel.costing import GpuPrice, PricingConfig, get_model, gpu_price, model_names, resolve_terms
from costmodel.costing.day import committed, price_bill


def specs(day: DayRecord) -> dict:
    return {h: validate_spec(h, d, str(day.path)) for h, d in day.doc.get("hardware_specs", {}).items()}


def pricing(day: DayRecord) -> PricingConfig:
    return PricingConfig.from_dict(day.doc.get("pricing") or {})


def prices(day: DayRecord, cfg: PricingConfig | None = None) -> dict[str, GpuPrice]:
    cfg = cfg or pricing(day)
    return {h: gpu_price(s, cfg) for h, s in specs(day).items()}


def repriced(day: DayRecord, cfg: PricingConfig) -> list[MonthBill]:
    """Every bill under `cfg` (the GPU-hours, energy and fleet sizes are the day's: price does not change them)."""
    ps = prices(day, cfg)
    return sorted((price_bill(b, ps[b.hardware]) if b.hardware in ps else b for b in day.bills), key=bill_order)


def pricing_models_table(day: DayRecord) -> tuple[pd.DataFrame, dict[str, str]]:
    """USD per month of each fleet meeting the SLO under every registered pricing model, and each
    model's cheapest fleet or tie (cheapest_text; "" where a GPU cannot be priced under it)."""
    base = pricing(day)
    rows = {}
    for m in model_names():
        cfg = PricingConfig(**{**base.to_dict(), "model": m})
        try:
            bills = repriced(day, cfg)
        except UserError:  # a model a GPU cannot be priced under (no purchase price): a blank column
            rows[m] = []
            continue
        rows[m] = bills
    fleets = [fleet_key(b) for b in day.bills if b.meets_slo_every_hour]
    out = pd.DataFrame({"fleet": fleets})
    for m, bills in rows.items():
        vals = {fleet_key(b): b.cost_usd_per_month for b in bills if b.meets_slo_every_hour}
        out[f"{m} USD/month"] = [vals.get(f, math.nan) for f in fleets]
    winners = {m: (cheapest_text(bills) if bills else "") for m, bills in rows.items()}
    return out, winners


def span_note(day: DayRecord) -> str:
    """' The load covers N h: ...' where the day's span is not 24 h ('' where it is)."""
    if abs(day.span_h - DAY_H) < 1e-9:
        return ""
    return (f" The load covers {day.span_h:g} h, not a whole day: its per-day figures (requests, GPU-hours, energy, USD) are scaled to "
            f"24 h, as the month is.")


def fleet_key(b: MonthBill) -> str:
    return f"{b.hardware} / {b.mode} / {b.policy}"


def cheapest(bills: list[MonthBill]) -> list[MonthBill]:
    """The winner, or every fleet of a tie (costmodel/costing/day_answer.py cheapest: the plan's rule,
    costs within TIE_FRAC or overlapping 95% intervals)."""
    return day_cheapest(bills)


def cheapest_text(bills: list[MonthBill]) -> str:
    """The cheapest fleet's key, 'tie: A = B' (no winner), or 'none' (no fleet meets the SLO every hour)."""
    best = cheapest(bills)
    return "none" if not best else fleet_key(best[0]) if len(best) == 1 else "tie: " + " = ".join(fleet_key(b) for b in best)


def price_sensitivity(day: DayRecord) -> pd.DataFrame:
    """Each GPU's hourly price at the low and the high end of its catalog range (the others as
    priced), one at a time: the winner (or the tie, cheapest_text) and its monthly cost there, and
    whether the answer changes."""
    base = pricing(day)
    base_win = cheapest_text(day.bills)
    rows = []
    for h, s in specs(day).items():
        values, sources = resolve_terms(h, base.terms)
        if "price_low_usd_per_gpu_hour" not in values:
            continue
        ends = {}
        for end in ("low", "high"):
            v = values[f"price_{end}_usd_per_gpu_hour"]
            cfg = PricingConfig(**{**base.to_dict(), "price_usd_per_gpu_hour": {**base.price_usd_per_gpu_hour, h: v}})
            ends[end] = (v, repriced(day, cfg))
        flips = [end for end, (_, bills) in ends.items() if cheapest_text(bills) not in (base_win, "none") and base_win != "none"]
        rows.append({"input": f"{h} USD per GPU-hour", "low_value": ends["low"][0], "high_value": ends["high"][0],
                     "winner_at_low": cheapest_text(ends["low"][1]), "usd_per_month_at_low": _cost(ends["low"][1]),
                     "winner_at_high": cheapest_text(ends["high"][1]), "usd_per_month_at_high": _cost(ends["high"][1]),
                     "winner_changes_at": ", ".join(flips) or "no", "range_source": sources["price_low_usd_per_gpu_hour"]})
    return pd.DataFrame(rows)


def _cost(bills: list[MonthBill]) -> float:
    best = cheapest(bills)
    return best[0].cost_usd_per_month if best else math.nan


def billed_gpu_hours(b: MonthBill, price: GpuPrice) -> float:
    """The GPU-hours a day is billed for under `price` (costmodel/costing/day.py)."""
    return b.replicas_max * DAY_H if committed(price) else b.gpu_hours_per_day


def owned(price: GpuPrice) -> bool:
    return get_model(price.basis).owned
