"""The day's answer in words, once, for every place that prints it (`costmodel plan --load-curve`'s
console, `costmodel report DAYDIR`'s HTML page and workbook): the cheapest fleet meeting the SLO every
hour, its month and year with its 95% interval, the runner-up (the cheapest fleet of another GPU and
mode), whether it is borderline, and what the winner rests on (a projected GPU profile said so, from
the profile's provenance; the engine model's held-out error, answer.py's heldout_clause). Where the
winner's and another fleet's costs tie or their intervals overlap (crossover.py's tie_group, the
plan's rule), the answer is a tie and names them all. A pure function of the day artefact read
through costmodel/schemas/day.py; a plan's per-load answer is answer.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.costing.answer import heldout_clause
from costmodel.costing.crossover import TIE_FRAC, overlaps, ties, tie_group
from costmodel.costing.pricing import HOURS_PER_MONTH
from costmodel.costing.terms import HOURS_PER_YEAR
from costmodel.errors import UserError
from costmodel.schemas.day import DayRecord, MonthBill, bill_order
from costmodel.schemas.provenance import provenance_kinds, rests_on, rests_on_items
from costmodel.slo import Slo, parse_slo


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


def group_basis(bills: list[MonthBill], profiles: dict) -> tuple[str, bool]:
    """What the winner or every fleet of a tie rests on, per GPU: the projection named once, the
    modes' inputs without repeats (as answer.py's plan answer); and whether a GPU is projected."""
    modes: dict[str, list[str]] = {}
    for b in bills:
        modes.setdefault(b.hardware, []).append(b.mode)
    parts, projected = [], False
    for h, ms in modes.items():
        prov = profiles.get(h)
        if not prov:
            continue
        first = day_basis(prov, ms[0])
        items = "; ".join(dict.fromkeys(i for m in ms for i in rests_on_items(prov, m)))
        if first.startswith("a projected"):
            projected = True
            parts.append(f"a projected {prov.get('hardware') or h} profile, not measured on that GPU: {items}")
        else:
            parts.append(items)
    return "; ".join(parts), projected


def fleet_label(b: MonthBill, prov: dict | None = None) -> str:
    precision = (prov or {}).get("precision")
    gpus = f"{b.replicas_min}-{b.replicas_max}" if b.replicas_min != b.replicas_max else f"{b.replicas_max}"
    return f"{gpus} x {b.hardware}" + (f" ({precision})" if precision else "") + f", {b.mode}, {POLICY_LABEL.get(b.policy, b.policy)}"


def _option(b: MonthBill) -> dict:
    """A bill as crossover.tie_group reads an option: its cost and the low end of its interval."""
    return {"hardware": b.hardware, "mode": b.mode, "gpus": b.replicas_max, "cost_usd_per_month": b.cost_usd_per_month,
            "cost_usd_per_month_low": b.cost_low, "bill": b}


def cheapest(bills: list[MonthBill]) -> list[MonthBill]:
    """The cheapest fleet meeting the SLO every hour, then every fleet of another (GPU, mode) tied
    with it (the plan's rule, crossover.tie_group: costs within TIE_FRAC, or 95% intervals that
    overlap): one bill is a winner, several a tie that none wins, none: no fleet meets the SLO every
    hour. The (GPU, mode)s compete, one fleet each (its cheapest policy)."""
    first: dict[tuple, MonthBill] = {}
    for b in sorted(bills, key=bill_order):
        if b.meets_slo_every_hour and b.cost_usd_per_month == b.cost_usd_per_month:
            first.setdefault((b.hardware, b.mode), b)
    best = list(first.values())
    if not best:
        return []
    group = {id(r["bill"]) for r in tie_group([_option(b) for b in best])}
    return [b for b in best if id(b) in group]


def answer_column(bills: list[MonthBill]) -> list[str]:
    """month.csv's `answer` per bill: 'cheapest', 'tie' (each fleet of a tie) or ''; all '' for a
    fleet file's pools (parts of one fleet, not options to choose between)."""
    if any(b.policy not in ("autoscaled", "static") for b in bills):
        return [""] * len(bills)
    best = cheapest(bills)
    mark = "tie" if len(best) > 1 else "cheapest"
    return [mark if any(b is x for x in best) else "" for b in bills]


def latency_slo(text: str) -> Slo | None:
    """The day's SLO without its headroom term (max_utilisation), as costmodel.slo reads it."""
    try:
        return parse_slo(",".join(c for c in (text or "").split(",") if not c.strip().lower().startswith("max_utilisation")))
    except UserError:
        return None


def _usd(x: float) -> str:
    return f"${x:,.0f}"


@dataclass(frozen=True)
class DayAnswer:
    """The cheapest fleet meeting the SLO every hour (None: none does), and the runner-up: the
    cheapest fleet of another (GPU, mode) meeting it; in a tie (`tied`: the other fleets tied with
    the winner, crossover.tie_group) the runner-up is the first of them."""

    winner: MonthBill | None
    fleet: str
    rests_on: str
    projected: bool
    runner_up: MonthBill | None
    runner_up_fleet: str
    tied: tuple[str, ...] = ()  # every other fleet tied with the winner (labels); empty: the runner-up alone is judged (ties/overlaps)
    heldout: str = ""  # the engine model's held-out error on the SLO's figure (answer.heldout_clause)

    @property
    def cost_usd_per_year(self) -> float:
        return self.winner.cost_usd_per_month / HOURS_PER_MONTH * HOURS_PER_YEAR if self.winner else math.nan

    @property
    def interval(self) -> bool:
        """The winner's cost has an interval: its peak's smaller counts are borderline."""
        return self.winner is not None and self.winner.cost_low < self.winner.cost_usd_per_month

    def _cost(self) -> str:
        w = self.winner
        out = f"{_usd(w.cost_usd_per_month)}/month ({_usd(self.cost_usd_per_year)}/year)"
        if self.interval:
            out += f", 95% interval {_usd(w.cost_low)}-{w.cost_usd_per_month:,.0f}/month (fewer replicas at the peak are borderline)"
        return out

    def _border(self) -> str:
        w = self.winner
        if not w.hours_borderline:
            return ""
        return f"; borderline in {w.hours_borderline} of {w.hours} hours ({w.borderline})"

    @property
    def text(self) -> str:
        if self.winner is None:
            return "No fleet meets the SLO in every hour of the day."
        held = f"; {self.heldout}" if self.heldout else ""
        if self.tie:  # the plan's rule (crossover.tie_group): never a winner by a cent, nor inside another's interval
            others = " = ".join(self.tied or (self.runner_up_fleet,))
            return (f"A tie among the fleets meeting the SLO every hour, at {self._cost()}: {self.fleet} = {others} (the same monthly cost within "
                    f"{TIE_FRAC:.0%} or overlapping 95% intervals: no winner){self._border()}. Rests on {self.rests_on}{held}.")
        runner = "no other fleet meets the SLO every hour"
        if self.runner_up is not None:
            runner = f"runner-up {self.runner_up_fleet} costs ${self.runner_up.cost_usd_per_month - self.winner.cost_usd_per_month:,.0f}/month more"
        return (f"Cheapest fleet meeting the SLO every hour: {self.fleet}, {self._cost()}{self._border()}; {runner}. "
                f"Rests on {self.rests_on}{held}.")

    @property
    def tie(self) -> bool:
        """Another fleet ties the winner: the same cost within the plan's TIE_FRAC, or overlapping intervals."""
        if self.tied:
            return True
        w, r = self.winner, self.runner_up
        return (w is not None and r is not None
                and (ties(w.cost_usd_per_month, r.cost_usd_per_month) or overlaps(w.cost_low, w.cost_usd_per_month, r.cost_low, r.cost_usd_per_month)))


def answer(day: DayRecord, bills: list[MonthBill] | None = None) -> DayAnswer:
    bills = sorted(bills if bills is not None else day.bills, key=bill_order)
    ok = [b for b in bills if b.meets_slo_every_hour]
    prov = day.doc.get("profiles", {})
    if not ok:
        return DayAnswer(None, "", "", False, None, "")
    group = cheapest(bills)
    w = group[0]
    p = prov.get(w.hardware)
    basis, projected = group_basis(group, prov)  # of a tie: every tied fleet's
    inside = {(b.hardware, b.mode) for b in group}
    tied = tuple(fleet_label(b, prov.get(b.hardware)) for b in group[1:])
    r = group[1] if len(group) > 1 else next((b for b in ok if (b.hardware, b.mode) not in inside), None)  # the best other (GPU, mode)
    slo = latency_slo(day.slo)
    held = heldout_clause(slo, prov, [b.hardware for b in group]) if slo is not None and slo.bounds else ""
    return DayAnswer(w, fleet_label(w, p), basis, projected, r, fleet_label(r, prov.get(r.hardware)) if r else "",
                     tied, held)
