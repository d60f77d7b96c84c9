"""Costing in one place: what a GPU-hour costs under a pricing model (pricing.py, models/, terms.py),
what a simulated point costs (costs.py), the cheapest SLO-meeting option per QPS and the
crossover (cheapest.py, crossover.py), and the answer every output prints (answer.py; a day's, day_answer.py). `plan`, `sweep` and `reports` import this surface only.

    pricing = PricingConfig(model="reserved-1y")
    a = analyse(points, parse_slo("p95_ttft_ms<=1000"), pricing, specs)
    a.cheapest, a.crossover.text

The surface loads lazily (PEP 562): a name is imported from its module on first use, so a command
that only declares the pricing options (pricing.py, models/: no table library) does not load what
`plan` and `report` need (answer.py, cheapest.py, crossover.py: pandas), issue 40's start-up.
"""

from importlib import import_module

# name -> the module of this package that defines it
_HOME = {
    "Decision": "answer",
    "answer_frame": "answer",
    "answer_lines": "answer",
    "decisions": "answer",
    "fleet_name": "answer",
    "LEAD_COLUMNS": "cheapest",
    "Analysis": "cheapest",
    "analyse": "cheapest",
    "crossovers": "cheapest",
    "COST_COLUMNS": "costs",
    "GPUS_PER_REPLICA": "costs",
    "PointCost": "costs",
    "add_costs": "costs",
    "cost_of_row": "costs",
    "point_cost": "costs",
    "CROSSOVER_TOLERANCE_FRAC": "crossover",
    "RANK_COLUMNS": "crossover",
    "TIE_FRAC": "crossover",
    "Crossover": "crossover",
    "best_per_cell": "crossover",
    "cheapest_per_qps": "crossover",
    "find_crossover": "crossover",
    "ranked_at": "crossover",
    "ties": "crossover",
    "with_seeds": "crossover",
    "DEFAULT_MODEL": "models",
    "PricingModel": "models",
    "Rate": "models",
    "get_model": "models",
    "model_names": "models",
    "register": "models",
    "DEFAULT_AMORTISATION_YEARS": "pricing",
    "DEFAULT_ELECTRICITY_USD_PER_KWH": "pricing",
    "DEFAULT_PUE": "pricing",
    "HOURS_PER_MONTH": "pricing",
    "SOURCES": "pricing",
    "GpuPrice": "pricing",
    "PricingConfig": "pricing",
    "PricingOptions": "options",
    "gpu_price": "pricing",
    "pricing_config": "pricing",
    "read_price_file": "pricing",
    "telemetry_power": "pricing",
    "DAYS_PER_MONTH": "terms",
    "HOURS_PER_YEAR": "terms",
    "TERMS": "terms",
    "resolve_terms": "terms",
}
__all__ = list(_HOME)


def __getattr__(name: str):
    try:
        module = _HOME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
