"""Pricing terms: the numbers a pricing model reads besides the GPU-hour price and the purchase
price (discounts, spot availability, host cost and power, the input/output price ratio). Each comes
from costmodel/data/hardware.json with its source (the catalog's `pricing_terms`, overridden per GPU
by an entry's own `pricing_terms`), or from the user (`--term NAME=VALUE`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from costmodel.errors import UserError
from costmodel.hardware import source_text

HOURS_PER_YEAR = 8760.0
DAYS_PER_MONTH = 365.25 / 12  # a calendar month in days: a day's bills (day.py) and the cluster's span repeated for a month
TERM_MAX = 1e7  # a host's USD or W per GPU, a price ratio: above ten million is a typo of zeros (costmodel/fields.py)


@dataclass(frozen=True)
class TermDoc:
    meaning: str
    unit: str
    fraction: bool = False  # must lie in [0, 1]


TERMS = {
    "reserved_1y_discount": TermDoc("discount of a 1-year commitment against the on-demand price", "fraction 0-1", True),
    "reserved_3y_discount": TermDoc("discount of a 3-year commitment against the on-demand price", "fraction 0-1", True),
    "upfront_share": TermDoc("share of a commitment paid at its start (0: all monthly, 1: all upfront)", "fraction 0-1", True),
    "spot_discount": TermDoc("spot price discount against the on-demand price", "fraction 0-1", True),
    "spot_availability": TermDoc("share of hours spot capacity is held; the rest is rented on demand", "fraction 0-1", True),
    "host_usd_per_gpu": TermDoc("on-prem: the host server (CPUs, memory, board, network cards) per GPU, bought with it", "USD per GPU"),
    "host_power_w_per_gpu": TermDoc("on-prem: the host server's power draw per GPU (always on)", "W per GPU"),
    "price_low_usd_per_gpu_hour": TermDoc("low end of the GPU-hour prices the catalog's source quotes (the sensitivity table's range)", "USD per GPU-hour"),
    "price_high_usd_per_gpu_hour": TermDoc("high end of the GPU-hour prices the catalog's source quotes (the sensitivity table's range)", "USD per GPU-hour"),
    "output_input_price_ratio": TermDoc("price of an output token / price of an input token when the cost is split the way API price "
                                        "sheets quote it", "ratio"),
}


@lru_cache(maxsize=1)
def _catalog_terms() -> tuple[dict, dict]:
    """(global terms, per-GPU terms) from the shipped catalog, each value -> (number, source text)."""
    doc = json.loads(resources.files("costmodel").joinpath("data/hardware.json").read_text())

    def read(d: dict, where: str) -> dict:
        out = {}
        for k, v in (d or {}).items():
            if k.startswith("_"):
                continue
            if k not in TERMS or not isinstance(v, dict) or "value" not in v or "source" not in v:
                raise UserError(f"costmodel/data/hardware.json: pricing term {where}.{k} is unknown or lacks value/source", "fix the catalog")
            out[k] = (float(v["value"]), source_text(str(v["source"])))
        return out

    per_gpu = {hid: read(g.get("pricing_terms"), hid) for hid, g in doc["gpus"].items()}
    return read(doc.get("pricing_terms"), "pricing_terms"), per_gpu


def check_term(name: str, value: float, where: str) -> float:
    if name not in TERMS:
        raise UserError(f"{where}: {name!r} is not a pricing term", f"terms are {', '.join(TERMS)}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (TERMS[name].fraction and v > 1) or (name == "output_input_price_ratio" and v <= 0) or v > TERM_MAX:
        rng = "between 0 and 1" if TERMS[name].fraction else f"in (0, {TERM_MAX:,g}]" if name == "output_input_price_ratio" else f"in [0, {TERM_MAX:,g}]"
        raise UserError(f"{where}: {name}={value} is out of range", f"give a value {rng} ({TERMS[name].unit})")
    return v


def resolve_terms(hardware: str, overrides: dict) -> tuple[dict, dict]:
    """(values, sources) of every term for `hardware`: catalog defaults <- the GPU's entry <- overrides."""
    glob, per_gpu = _catalog_terms()
    merged = {**glob, **per_gpu.get(hardware, {})}
    for k, v in overrides.items():
        merged[k] = (check_term(k, v, "--term"), f"--term {k}={v:g} (user override)")
    return {k: v for k, (v, _) in merged.items()}, {k: s for k, (_, s) in merged.items()}
