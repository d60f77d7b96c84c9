"""The answer a report opens with: per load, the cheapest SLO-meeting fleet (or the tie), its monthly
and annual cost, the runner-up and by how much, and what the winner rests on. The rows and their
words are costmodel/costing/answer.py's, the same `costmodel plan` prints; this module reads
them for a report's results, with the plan's --seeds and --sensitivity records."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from costmodel.schemas.provenance import BASIS, rests_on
from costmodel.costing import Analysis, Decision
from costmodel.costing import decisions as plan_decisions
from reports.sources import Results

__all__ = ["BASIS", "Decision", "decisions", "decision_frame", "rests_on", "SensitivityView", "sensitivity_view", "seed_intervals"]


def decisions(res: Results, a: Analysis) -> list[Decision]:
    """One Decision per evaluated QPS (costmodel/costing/answer.py: the words plan prints too)."""
    return plan_decisions(a, res.profiles)


def decision_frame(ds: list[Decision]) -> pd.DataFrame:
    return pd.DataFrame([d.__dict__ for d in ds])


@dataclass(frozen=True)
class SensitivityView:
    """A plan's sensitivity record (plan --sensitivity) as the report shows it."""

    table: pd.DataFrame
    base_usd_per_month: float
    verdict: str


def sensitivity_view(res: Results) -> SensitivityView | None:
    rec = res.extras.get("sensitivity")
    if not rec:
        return None
    return SensitivityView(pd.DataFrame(rec["table"]), float(rec["base_usd_per_month"]), str(rec["verdict"]))


def seed_intervals(res: Results) -> dict[float, tuple[str, str]]:
    """QPS -> ('N seeds: 95% interval', 'mean, winners per seed') of the winner's monthly cost (plan --seeds)."""
    rec = res.extras.get("replicates")
    if not rec:
        return {}
    out = {}
    for r in rec["decision"]:
        lo, hi = r["cost_usd_per_month_ci95_low"], r["cost_usd_per_month_ci95_high"]
        ci = f"${lo:,.0f} - ${hi:,.0f}" if lo == lo and hi == hi else "n/a"
        out[float(r["qps"])] = (f"{r['seeds']} seeds: 95% interval {ci}", f"mean ${r['cost_usd_per_month_mean']:,.0f}; winners {r['winners']}")
    return out
