"""Which fleets of a day need not be simulated: each fleet's monthly cost has a floor known before its
day runs, and a fleet whose floor is above what the answer can still use is listed, not simulated.

The floor (the low end of its cost interval can be no lower):
- static for the peak: its replicas (the fewest not settled to miss at the peak, replicas_low) all
  day, at the GPU's price (exact for a rental; an owned GPU's electricity adds to it);
- autoscaled (request-rate target T per replica): in each interval at least
  ceil(r * BOUND_RATE_SHARE / ((1 + tolerance) * T)) replicas, r the curve's lowest rate over the
  interval and the BOUND_LOOKBACK_S before it (a rising load is served by replicas asked for
  earlier), and never fewer than min_replicas. BOUND_RATE_SHARE allows the measured rate to read below
  the curve's by its Poisson noise (the rate over a minute of at least 1 request/s reads 20% low
  with odds of ~3%, and the scale-down window keeps the most wanted over five such minutes); the
  tolerance lets a fleet stay up to 10% over its target. A trace's fleet: min_replicas.

What the answer can use (costmodel/costing/day_answer.py): the cheapest fleet meeting the SLO every
hour per (GPU, mode), the winner among them, the runner-up (the next (GPU, mode)) and every fleet tied
with the winner (crossover.tie_group: within TIE_FRAC or overlapping intervals). A fleet whose floor
is no lower than its own (GPU, mode)'s cheapest simulated fleet meeting the SLO (SAME_COST_FRAC), or above both the runner-up's
cost and the winner's by more than TIE_FRAC, changes none of these: it is listed in the month table
with its floor (`not_simulated`). Fleets are simulated cheapest floor first, so the floors prune the most.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.costing import DAYS_PER_MONTH, GpuPrice
from costmodel.costing.crossover import TIE_FRAC
from costmodel.costing.day import cost_floor_usd_per_day
from costmodel.costing.day_answer import cheapest
from costmodel.schemas.day import DAY_H, MonthBill

FLOOR_SLACK = 1e-3  # a simulated day's fleet can stand a little short of the span (its last arrival or drain): the floor is this much lower
SAME_COST_FRAC = 2e-3  # within one (GPU, mode), a floor this close to its cheapest simulated fleet can at best equal it (one fleet competes)
BOUND_RATE_SHARE = 0.8  # the measured arrival rate's lowest plausible reading, as a share of the curve's
BOUND_LOOKBACK_S = 900.0  # uncompressed seconds before an interval whose rate may still size its fleet
NOT_SIMULATED = "not simulated"


def floor_replicas(lc, target: float | None, scaling, interval_s: float, n_static: int | None = None) -> list[int]:
    """The fewest replicas each interval of the day can hold: n_static all day (a static fleet), else
    the request-rate autoscaler's floor against the curve (module docstring)."""
    span = lc.span_s
    n = max(1, math.ceil(span / interval_s - 1e-9))
    if n_static is not None:
        return [n_static] * n
    if lc.curve is None or not target:
        return [scaling.min_replicas] * n
    t = np.asarray(lc.curve.time_s, float)
    out = []
    for k in range(n):
        t0, t1 = k * interval_s, min((k + 1) * interval_s, span)
        grid = np.concatenate([np.linspace(max(0.0, t0 - BOUND_LOOKBACK_S), t1, 64), t[(t > t0 - BOUND_LOOKBACK_S) & (t < t1)]])
        low = float(lc.curve.rate_at(grid).min())
        out.append(max(scaling.min_replicas, math.ceil(low * BOUND_RATE_SHARE / ((1 + scaling.tolerance) * target) - 1e-9)))
    return out


def cost_floor(lc, price: GpuPrice, counts: list[int], interval_s: float, slack: float = FLOOR_SLACK) -> float:
    """USD per month of a fleet holding `counts` replicas in the day's intervals (its energy not priced:
    a floor; `slack` lower)."""
    widths = [min((k + 1) * interval_s, lc.span_s) - k * interval_s for k in range(len(counts))]
    gpu_hours_per_day = sum(n * w for n, w in zip(counts, widths)) / 3600 * DAY_H / (lc.span_s / 3600)
    return cost_floor_usd_per_day(price, gpu_hours_per_day, max(counts)) * DAYS_PER_MONTH * (1 - slack)


def prunable(floor_usd: float, limit: tuple) -> bool:
    """Whether a fleet of floor `floor_usd` cannot change the answer under prune_limit's `limit`."""
    usd, _, own = limit
    return floor_usd >= usd * (1 - SAME_COST_FRAC) if own else floor_usd > usd


def prune_limit(bills: list[MonthBill], hardware: str, mode: str) -> tuple[float, str, bool]:
    """The cost above which a fleet of (hardware, mode) cannot change the day's answer, given the
    priced bills simulated so far, the fleet that sets it (inf, '' while nothing bounds it), and
    whether that is its own (GPU, mode)'s cheapest fleet (then a floor at the same cost, within
    SAME_COST_FRAC, is enough: only one fleet per (GPU, mode) competes, and ties within one are not named)."""
    best: dict[tuple, MonthBill] = {}
    for b in bills:
        if b.meets_slo_every_hour and math.isfinite(b.cost_usd_per_month):
            k = (b.hardware, b.mode)
            if k not in best or b.cost_usd_per_month < best[k].cost_usd_per_month:
                best[k] = b
    limits = []
    own = best.get((hardware, mode))
    if own is not None:
        limits.append((own.cost_usd_per_month, f"{own.hardware}/{own.mode} {own.policy} (${own.cost_usd_per_month:,.0f}/month, meeting the SLO every hour)", True))
    ranked = sorted(best.values(), key=lambda b: b.cost_usd_per_month)
    if len(ranked) >= 2:
        w, r = ranked[0], ranked[1]
        lim = max(r.cost_usd_per_month, w.cost_usd_per_month * (1 + TIE_FRAC))
        limits.append((lim, _two_cheapest(w, r), False))
    return min(limits, key=lambda x: (x[0], not x[2])) if limits else (math.inf, "", False)


def _two_cheapest(w: MonthBill, r: MonthBill) -> str:
    """The two cheapest fleets as the text names them: a cheapest and a runner-up, or a tie as the answer calls one."""
    name = lambda b: f"{b.hardware}/{b.mode} {b.policy} (${b.cost_usd_per_month:,.0f})"  # noqa: E731
    if len(cheapest([w, r])) > 1:  # the answer's own tie rule (costs within 1% or overlapping intervals)
        return f"the tied cheapest fleets {name(w)} = {name(r)}, both meeting the SLO every hour"
    return f"the cheapest fleet {name(w)} and the runner-up {name(r)}, both meeting the SLO every hour"


def not_simulated(hardware: str, mode: str, policy: str, floor_usd: float, than: str, pricing: str) -> MonthBill:
    """A fleet listed with its floor instead of its simulated day (no figures; --every-fleet simulates it)."""
    return MonthBill(hardware, mode, policy, policy, 0, 0, 0, 0, float("nan"), 0, 0, float("nan"), float("nan"), float("nan"),
                     float("nan"), float("nan"),
                     note=f"{NOT_SIMULATED}: costs at least ${floor_usd:,.0f}/month at {pricing} prices, no less than {than} (--every-fleet simulates it)")
