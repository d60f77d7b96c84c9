"""Grid density for a time budget: the campaign's grid (measure/ops/campaign.py grid_for) thinned
along each axis until the estimated campaign time fits --budget-s, and what was dropped.

Levels, densest first: full (every grid point), half (every other value of each axis, the first
and last kept), coarse (every fourth), smoke (a few shapes per op). The query axis q is never
thinned (MTP verify lives at q = 3, 5). The estimate is the kernel set's measured seconds per unit
of each family plus its self-check time and the device facts measured first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.errors import UserError
from measure.ops.kernelset import KernelSet

LEVELS = ("full", "half", "coarse", "smoke")
STRIDE = {"full": 1, "half": 2, "coarse": 4}
THINNED_AXES = ("m", "seqs", "ctx")
FACTS_S = 10.0  # copy bandwidth, matmul rates and the per-step device term, measured first (a few s on an H100)
AUTOTUNE_CHECK_S = 240.0  # every self-check (no kernel set): the fresh-H100 figure


@dataclass
class GridPlan:
    level: str
    units: list  # (precision, OpDef, axis values)
    est_s: float
    dropped: dict = field(default_factory=dict)  # axis -> values no unit keeps any more; "units": how many dropped

    def describe(self) -> str:
        what = f"{self.level} grid, {len(self.units)} units, about {self.est_s:.0f} s"
        if not self.dropped:
            return what
        axes = "; ".join(f"{a} = {', '.join(map(str, v))}" for a, v in self.dropped.items() if a != "units")
        return f"{what} (the budget drops {self.dropped['units']} units of the full grid: {axes})"


def _thin(units: list, stride: int) -> list:
    """Keep, per (precision, op), every `stride`-th value of each thinned axis (first and last kept)."""
    if stride == 1:
        return list(units)
    values: dict = {}
    for pr, op, at in units:
        for a in THINNED_AXES:
            if a in at:
                values.setdefault((pr, op.name, a), set()).add(at[a])
    keep = {}
    for key, vs in values.items():
        vs = sorted(vs)
        keep[key] = set(vs[::stride]) | {vs[-1]}
    return [u for u in units if all(u[2][a] in keep[(u[0], u[1].name, a)] for a in THINNED_AXES if a in u[2])]


def estimate_s(units: list, ks: KernelSet) -> float:
    return FACTS_S + (ks.check_s if ks.name else AUTOTUNE_CHECK_S) + sum(ks.seconds(op.family) for _, op, _ in units)


def _dropped(full: list, kept: list) -> dict:
    if len(kept) == len(full):
        return {}
    seen = {a: {u[2][a] for u in kept if a in u[2]} for a in THINNED_AXES}
    out = {a: sorted({u[2][a] for u in full if a in u[2]} - seen[a]) for a in THINNED_AXES}
    return {"units": len(full) - len(kept), **{a: v for a, v in out.items() if v}}


def plan_grid(units: list, ks: KernelSet, budget_s: float, force: str | None = None, smoke_units: list | None = None) -> GridPlan:
    """The densest level whose estimate fits `budget_s` (or `force`'s level); a budget below one
    unit's time is a one-line error saying the minimum."""
    names = {(u[0], u[1].name) for u in units}
    by_level = {lv: _thin(units, s) for lv, s in STRIDE.items()}
    by_level["smoke"] = [u for u in (smoke_units or []) if (u[0], u[1].name) in names] or by_level["coarse"]
    if force is not None:
        if force not in LEVELS:
            raise UserError(f"grid {force!r} is not a density", f"use one of {', '.join(LEVELS)}")
        return GridPlan(force, by_level[force], estimate_s(by_level[force], ks), _dropped(units, by_level[force]))
    cheapest = min((ks.seconds(op.family) for _, op, _ in units), default=0.0)
    minimum = estimate_s([], ks) + cheapest
    if budget_s < minimum:
        raise UserError(f"--budget-s {budget_s:g} is too small for one unit",
                        f"give at least {minimum:.0f} s (device facts, self-checks of the kernels used, one unit)")
    for lv in LEVELS:
        est = estimate_s(by_level[lv], ks)
        if est <= budget_s or lv == "smoke":
            return GridPlan(lv, by_level[lv], est, _dropped(units, by_level[lv]))
    raise AssertionError("unreachable")
