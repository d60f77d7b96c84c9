"""Costing in one place: what a GPU-hour costs under a pricing model (pricing.py, models/, terms.py),
what a simulated point costs (costs.py), the cheapest SLO-meeting option per QPS and the
crossover (cheapest.py, crossover.py), and the answer every output prints (answer.py). `plan`, `sweep` and `reports` import this surface only.

    pricing = PricingConfig(model="reserved-1y")
    a = analyse(points, parse_slo("p95_ttft_ms<=1000"), pricing, specs)
    a.cheapest, a.crossover.text
"""

from simulate.plan.costing.answer import Decision, answer_frame, answer_lines, decisions, fleet_name
from simulate.plan.costing.cheapest import LEAD_COLUMNS, Analysis, analyse
from simulate.plan.costing.costs import COST_COLUMNS, GPUS_PER_REPLICA, PointCost, add_costs, cost_of_row, point_cost
from simulate.plan.costing.crossover import (
    CROSSOVER_TOLERANCE_FRAC, RANK_COLUMNS, TIE_FRAC, Crossover, best_per_cell, cheapest_per_qps, find_crossover, rank_options, ties, with_seeds,
)
from simulate.plan.costing.models import DEFAULT_MODEL, PricingModel, Rate, get_model, model_names, register
from simulate.plan.costing.pricing import (
    DEFAULT_AMORTISATION_YEARS, DEFAULT_ELECTRICITY_USD_PER_KWH, DEFAULT_PUE, HOURS_PER_MONTH, SOURCES, GpuPrice, PricingConfig,
    PricingOptions, gpu_price, pricing_config, read_price_file, telemetry_power,
)
from simulate.plan.costing.terms import HOURS_PER_YEAR, TERMS, resolve_terms

__all__ = [
    "Decision", "answer_frame", "answer_lines", "decisions", "fleet_name",
    "LEAD_COLUMNS", "Analysis", "analyse", "COST_COLUMNS", "GPUS_PER_REPLICA", "PointCost", "add_costs", "cost_of_row", "point_cost",
    "CROSSOVER_TOLERANCE_FRAC", "RANK_COLUMNS", "TIE_FRAC", "Crossover", "best_per_cell", "cheapest_per_qps", "find_crossover", "rank_options",
    "ties", "with_seeds", "DEFAULT_MODEL", "PricingModel",
    "Rate", "get_model", "model_names", "register", "DEFAULT_AMORTISATION_YEARS", "DEFAULT_ELECTRICITY_USD_PER_KWH", "DEFAULT_PUE",
    "HOURS_PER_MONTH", "SOURCES", "GpuPrice", "PricingConfig", "PricingOptions", "gpu_price", "pricing_config", "read_price_file",
    "telemetry_power", "HOURS_PER_YEAR", "TERMS", "resolve_terms",
]
