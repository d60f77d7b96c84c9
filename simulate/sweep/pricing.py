"""Cost columns for a sweep's results: every row priced by its point's `pricing` (model name) and
`price` (on-demand USD per GPU-hour of its GPU) parameters, else on-demand at the catalog price;
`costmodel sweep --pricing ...` sets those parameters for every point that does not set its own.
A grid over `price` or `pricing` gives one row per value; points that differ only in those share one
simulation (by_simulation, fan_out)."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from costmodel.errors import UserError
from costmodel.shipped import resolve_profile
from costmodel.costing import COST_COLUMNS, PricingConfig, cost_of_row, gpu_price
from simulate.sweep.spec import SweepPoint, SweepSpec, point_id


PRICE_PARAMS = ("price", "pricing")  # change the cost columns, not the simulation


def by_simulation(todo: list[SweepPoint]) -> tuple[list[SweepPoint], dict[str, list[SweepPoint]]]:
    """The points to simulate (one per set of points differing only in PRICE_PARAMS) and, per
    simulated point id, the other points that take its result."""
    reps: dict[str, SweepPoint] = {}
    siblings: dict[str, list[SweepPoint]] = {}
    for p in todo:
        key = point_id({k: v for k, v in p.params.items() if k not in PRICE_PARAMS})
        if key in reps:
            siblings[reps[key].point_id].append(p)
        else:
            reps[key], siblings[p.point_id] = p, []
    return list(reps.values()), siblings


def fan_out(rows: list[dict], siblings: dict[str, list[SweepPoint]]) -> list[dict]:
    """`rows` plus, for each, a copy per sibling point with that point's id and price parameters."""
    out = []
    for r in rows:
        out.append(r)
        base = {k: v for k, v in r.items() if not (k.startswith("param_") and k[len("param_"):] in PRICE_PARAMS)}
        for s in siblings.get(r["point_id"], []):
            out.append({**base, "point_id": s.point_id, **{f"param_{k}": s.params[k] for k in PRICE_PARAMS if k in s.params}})
    return out


def point_pricing(params: dict, base: PricingConfig) -> PricingConfig:
    """The PricingConfig of one point: `base` with the point's model and price."""
    cfg = replace(base, model=params.get("pricing", base.model))
    if "price" in params:
        cfg = replace(cfg, price_usd_per_gpu_hour={**cfg.price_usd_per_gpu_hour, params["hardware"]: float(params["price"])})
    return cfg.validate()


def with_pricing(spec: SweepSpec, base: PricingConfig | None) -> SweepSpec:
    """`spec` with `base`'s model and price overrides as every point's defaults (point ids follow)."""
    if base is None:
        return spec
    if base != PricingConfig(model=base.model, price_usd_per_gpu_hour=base.price_usd_per_gpu_hour):
        raise UserError("sweep prices its points by --pricing and --price (or the spec's pricing and price parameters) only",
                        "drop --term, --purchase-usd, --electricity-usd-per-kwh, --pue, --amortisation-years and --telemetry; "
                        "re-price the results with `costmodel report OUT --pricing ...` and those options")
    known = {p.params["hardware"] for p in spec.points}
    for hw in base.price_usd_per_gpu_hour:
        if hw not in known:
            raise UserError(f"--price {hw}=...: {hw!r} is not among the GPUs of this sweep", f"use one of {', '.join(sorted(known))}")
    out = []
    for p in spec.points:
        params = dict(p.params)
        params.setdefault("pricing", base.model)
        if params["hardware"] in base.price_usd_per_gpu_hour:
            params.setdefault("price", base.price_usd_per_gpu_hour[params["hardware"]])
        out.append(SweepPoint(point_id(params), params))
    return replace(spec, points=out)


def with_costs(table: pd.DataFrame, points: list[SweepPoint], base: PricingConfig = PricingConfig()) -> pd.DataFrame:
    """`table` (one row per point, in order) with COST_COLUMNS; rows with no replica count stay empty."""
    specs: dict[tuple, object] = {}
    rows = []
    for point, row in zip(points, table.to_dict("records")):
        p = point.params
        reps = row.get("replicas")
        if reps is None or (isinstance(reps, float) and not math.isfinite(reps)):
            rows.append({})
            continue
        key = (p.get("profile"), p["hardware"])
        if key not in specs:
            specs[key] = resolve_profile(p.get("profile"), p["hardware"]).hardware_spec()
        rows.append(cost_of_row(row, gpu_price(specs[key], point_pricing(p, base))).to_dict())
    costs = pd.DataFrame(rows, columns=list(COST_COLUMNS), index=table.index)
    return pd.concat([table.drop(columns=[c for c in COST_COLUMNS if c in table.columns]), costs], axis=1)
