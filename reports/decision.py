"""The answer a report opens with: per load, the cheapest SLO-meeting fleet, its monthly and annual
cost, the runner-up and by how much, and whether the winner rests on measured, projected or prior
inputs (read from the winning GPU's profile provenance for the winning mode). The HTML page, the
workbook's Summary sheet and the CLI all print these rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from costmodel.modes import get_mode
from costmodel.stepcost import host_overhead
from simulate.plan.costing import HOURS_PER_MONTH, HOURS_PER_YEAR, Analysis, best_per_cell, rank_options
from reports.sources import Results

BASIS = {"measured": "measured", "projected": "projected", "published": "prior", "roofline": "prior (roofline)", "endpoint": "measured (endpoint)"}


@dataclass(frozen=True)
class Decision:
    qps: float
    meets: bool  # False: no evaluated option meets the SLO at this load
    fleet: str  # e.g. "3 x rtx-5090 (int4), mtp"
    hardware: str
    mode: str
    gpus: int
    cost_usd_per_month: float
    cost_usd_per_year: float
    upfront_usd: float
    runner_up: str
    runner_up_more_usd_per_month: float  # how much more the runner-up costs (NaN: no runner-up)
    runner_up_more_pct: float
    rests_on: str  # e.g. "projected pass timings; prior commit statistics"

    @property
    def margin(self) -> str:
        """How much more the runner-up costs, or that it ties (the tie rule: USD per 1M output tokens, then fewer GPUs)."""
        if not self.runner_up:
            return ""
        if self.runner_up_more_usd_per_month == 0:
            return "ties on monthly cost (the winner serves more tokens per dollar)"
        return f"costs ${self.runner_up_more_usd_per_month:,.0f}/month more (+{self.runner_up_more_pct:.0f}%)"

    @property
    def text(self) -> str:
        if not self.meets:
            return f"At {self.qps:g} QPS no option meets the SLO."
        runner = f"; runner-up {self.runner_up} {self.margin}" if self.runner_up else "; no other option meets the SLO"
        return (f"At {self.qps:g} QPS: {self.fleet}, ${self.cost_usd_per_month:,.0f}/month (${self.cost_usd_per_year:,.0f}/year){runner}. "
                f"Rests on {self.rests_on}.")


def rests_on(prov: dict, mode: str) -> str:
    """The bases of the inputs one mode's figures rest on, e.g. 'projected pass timings; prior MTP acceptance'."""
    parts: dict[str, set] = {}
    for d in prov.get("pass_models", {}).get(mode, {}).values():
        parts.setdefault("pass timings", set()).add(BASIS.get(d["kind"], d["kind"]))
    for part in get_mode(mode).parts:  # the profile parts the mode draws from, as the provenance account records them
        for kind in sorted(part.bases(prov[part.key])) if prov.get(part.key) else ():
            parts.setdefault(part.title or part.label, set()).add(BASIS.get(kind, kind))
    term = ((prov.get("engine") or {}).get("host_overhead") or {}).get(mode)
    if isinstance(term, dict):  # the engine's step work beside the passes (costmodel/stepcost/host_overhead.py)
        parts.setdefault("engine step term", set()).add(host_overhead.basis(term))
    if not parts:
        kind = prov.get("provenance", {}).get("kind", "unknown")
        return f"{BASIS.get(kind, kind)} inputs (profile details not available)"
    return "; ".join(f"{'/'.join(sorted(k))} {part}" for part, k in parts.items())


def _fleet(r: dict, prov: dict) -> str:
    precision = prov.get("precision")
    return f"{int(r['gpus'])} x {r['hardware']}" + (f" ({precision})" if precision else "") + f", {r['mode']}"


def decisions(res: Results, a: Analysis) -> list[Decision]:
    """One Decision per evaluated QPS, under the shared tie rule (simulate/plan/costing/crossover.py)."""
    best = best_per_cell(a.points)
    out = []
    for q in a.qps:
        cand = rank_options(best[best["qps"] == q]) if not best.empty else best
        if cand.empty:
            out.append(Decision(q, False, "", "", "", 0, math.nan, math.nan, math.nan, "", math.nan, math.nan, ""))
            continue
        w = cand.iloc[0].to_dict()
        prov = res.profiles.get(str(w["hardware"]), {})
        runner = cand.iloc[1].to_dict() if len(cand) > 1 else None
        more = runner["cost_usd_per_month"] - w["cost_usd_per_month"] if runner else math.nan
        pct = 100.0 * more / w["cost_usd_per_month"] if runner and w["cost_usd_per_month"] > 0 else math.nan
        out.append(Decision(q, True, _fleet(w, prov), str(w["hardware"]), str(w["mode"]), int(w["gpus"]), float(w["cost_usd_per_month"]),
                            float(w["cost_usd_per_month"]) / HOURS_PER_MONTH * HOURS_PER_YEAR, float(w.get("upfront_usd", 0.0) or 0.0),
                            _fleet(runner, res.profiles.get(str(runner["hardware"]), {})) if runner else "", more, pct,
                            rests_on(prov, str(w["mode"]))))
    return out


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
