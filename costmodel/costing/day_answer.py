"""The day's answer in words, once, for every place that prints it (`costmodel plan --load-curve`'s
console, `costmodel report DAYDIR`'s HTML page and workbook): the cheapest fleet meeting the SLO every
hour, its month and year, the runner-up (the cheapest fleet of another GPU and mode), and what the
winner rests on (a projected GPU profile said so, from the profile's provenance). A pure function of
the day artefact read through costmodel/schemas/day.py; a plan's per-load answer is answer.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.costing.crossover import TIE_FRAC
from costmodel.costing.pricing import HOURS_PER_MONTH
from costmodel.costing.terms import HOURS_PER_YEAR
from costmodel.schemas.day import DayRecord, MonthBill, bill_order
from costmodel.schemas.provenance import provenance_kinds, rests_on


POLICY_LABEL = {"autoscaled": "autoscaled", "static": "static for the peak"}


def day_basis(prov: dict | None, mode: str) -> str:
    """What one fleet's figures rest on, a projected GPU profile named first (its source quoted)."""
    if not prov:
        return ""
    basis = rests_on(prov, mode)
    whole = prov.get("provenance") or {}
    if whole.get("kind") == "projected" or "projected" in provenance_kinds(prov):
        return f"a projected {prov.get('hardware') or '?'} profile, not measured on that GPU: {basis}"
    return basis


def fleet_label(b: MonthBill, prov: dict | None = None) -> str:
    precision = (prov or {}).get("precision")
    gpus = f"{b.replicas_min}-{b.replicas_max}" if b.replicas_min != b.replicas_max else f"{b.replicas_max}"
    return f"{gpus} x {b.hardware}" + (f" ({precision})" if precision else "") + f", {b.mode}, {POLICY_LABEL.get(b.policy, b.policy)}"


@dataclass(frozen=True)
class DayAnswer:
    """The cheapest fleet meeting the SLO every hour (None: none does), and the runner-up: the
    cheapest fleet of another (GPU, mode) meeting it."""

    winner: MonthBill | None
    fleet: str
    rests_on: str
    projected: bool
    runner_up: MonthBill | None
    runner_up_fleet: str

    @property
    def cost_usd_per_year(self) -> float:
        return self.winner.cost_usd_per_month / HOURS_PER_MONTH * HOURS_PER_YEAR if self.winner else math.nan

    @property
    def text(self) -> str:
        if self.winner is None:
            return "No fleet meets the SLO in every hour of the day."
        w = self.winner
        if self.tie:  # the plan's rule (costmodel/costing/crossover.py TIE_FRAC): never a winner by a cent
            return (f"A tie among the fleets meeting the SLO every hour, at ${w.cost_usd_per_month:,.0f}/month "
                    f"(${self.cost_usd_per_year:,.0f}/year) each: {self.fleet} = {self.runner_up_fleet} (the same monthly cost within "
                    f"{TIE_FRAC:.0%}: no winner). Rests on {self.rests_on}.")
        runner = "no other fleet meets the SLO every hour"
        if self.runner_up is not None:
            runner = f"runner-up {self.runner_up_fleet} costs ${self.runner_up.cost_usd_per_month - w.cost_usd_per_month:,.0f}/month more"
        return (f"Cheapest fleet meeting the SLO every hour: {self.fleet}, ${w.cost_usd_per_month:,.0f}/month "
                f"(${self.cost_usd_per_year:,.0f}/year); {runner}. Rests on {self.rests_on}.")

    @property
    def tie(self) -> bool:
        """The runner-up costs the same as the winner within the plan's tie fraction."""
        return (self.winner is not None and self.runner_up is not None
                and self.runner_up.cost_usd_per_month - self.winner.cost_usd_per_month <= TIE_FRAC * self.winner.cost_usd_per_month)


def answer(day: DayRecord, bills: list[MonthBill] | None = None) -> DayAnswer:
    ok = [b for b in sorted(bills if bills is not None else day.bills, key=bill_order) if b.meets_slo_every_hour]
    prov = day.doc.get("profiles", {})
    if not ok:
        return DayAnswer(None, "", "", False, None, "")
    w = ok[0]
    p = prov.get(w.hardware)
    basis = day_basis(p, w.mode)
    r = next((b for b in ok[1:] if (b.hardware, b.mode) != (w.hardware, w.mode)), None)  # the best other (GPU, mode), not the same fleet's other policy
    return DayAnswer(w, fleet_label(w, p), basis, basis.startswith("a projected"), r, fleet_label(r, prov.get(r.hardware)) if r else "")
