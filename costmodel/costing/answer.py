"""The answer a plan prints, once, for every place that prints it (plan's console, the HTML answer
box, the workbook's Summary, the CSVs): per load the cheapest SLO-meeting fleet, or the tie and
every option in it; its monthly and annual cost; the runner-up and by how much; and what the
winner rests on (measured, projected, roofline-only or prior inputs, read from the winning GPU's
profile provenance). The crossover's words are `Analysis.crossover.text` (crossover.py).

    ds = decisions(analysis, {h: profile_provenance(p) for h, p in profiles.items()})
    [d.text for d in ds] + [analysis.crossover.text]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from costmodel.modes import mode_order
from costmodel.schemas.provenance import rests_on_items
from costmodel.costing.cheapest import Analysis
from costmodel.costing.crossover import option_name, ranked_at, tie_group
from costmodel.slo import Slo
from costmodel.costing.pricing import HOURS_PER_MONTH
from costmodel.costing.terms import HOURS_PER_YEAR


@dataclass(frozen=True)
class Decision:
    qps: float
    meets: bool  # False: no evaluated option meets the SLO at this load
    fleet: str  # e.g. "3 x rtx-5090 (int4), mtp"; a tie: "1 x h100-sxm (bf16): diffusion = mtp = ar"
    hardware: str  # the first option (of a tie: in registry order)
    mode: str
    gpus: int
    cost_usd_per_month: float
    cost_usd_per_year: float
    upfront_usd: float
    runner_up: str  # the cheapest option that costs more than the winner (or the tie)
    runner_up_more_usd_per_month: float  # how much more the runner-up costs (NaN: no runner-up)
    runner_up_more_pct: float
    rests_on: str  # e.g. "projected pass timings (...); prior MTP acceptance"; of a tie: every tied option's
    tied: tuple[str, ...] = ()  # every option of a tie ("1 x h100-sxm (bf16), diffusion", ...); empty: one winner
    cost_usd_per_month_low: float = math.nan  # the low end of the cost's interval (a borderline count below the settled one); NaN: none
    borderline: str = ""  # the winner's counts below its settled one whose verdict is borderline, and why
    heldout: str = ""  # the engine model's held-out error on the SLO's figure, one clause

    @property
    def tie(self) -> bool:
        return len(self.tied) > 1

    @property
    def margin(self) -> str:
        """How much more the runner-up costs."""
        if not self.runner_up:
            return ""
        return f"costs ${self.runner_up_more_usd_per_month:,.0f}/month more (+{self.runner_up_more_pct:.0f}%)"

    @property
    def text(self) -> str:
        if not self.meets:
            return f"At {self.qps:g} QPS no option meets the SLO."
        runner = f"; runner-up {self.runner_up} {self.margin}" if self.runner_up else "; no other option meets the SLO"
        cost = f"${self.cost_usd_per_month:,.0f}/month (${self.cost_usd_per_year:,.0f}/year)"
        if self.interval:
            cost += f", 95% interval ${self.cost_usd_per_month_low:,.0f}-{self.cost_usd_per_month:,.0f}/month (fewer replicas are borderline)"
        head = (f"a tie at {cost}: {self.fleet} (the same fleet cost or overlapping intervals: no winner)" if self.tie else f"{self.fleet}, {cost}")
        held = f"; {self.heldout}" if self.heldout else ""
        return f"At {self.qps:g} QPS: {head}{runner}. Rests on {self.rests_on}{held}."

    @property
    def interval(self) -> bool:
        """The winner's cost has an interval: a borderline count below its settled one."""
        return math.isfinite(self.cost_usd_per_month_low) and self.cost_usd_per_month_low < self.cost_usd_per_month


def fleet_name(r: dict, prov: dict) -> str:
    precision = prov.get("precision")
    return f"{int(r['gpus'])} x {r['hardware']}" + (f" ({precision})" if precision else "") + f", {r['mode']}"


def _group_name(rows: list[dict], profiles: dict[str, dict]) -> str:
    """One fleet, or a tie: '1 x h100-sxm (bf16): diffusion = mtp' when the tied options share the GPUs."""
    names = [fleet_name(r, profiles.get(str(r["hardware"]), {})) for r in rows]
    gpus = {n.rsplit(", ", 1)[0] for n in names}
    if len(rows) > 1 and len(gpus) == 1:
        return f"{gpus.pop()}: " + " = ".join(str(r["mode"]) for r in rows)
    return " = ".join(names)


def _rests_on(rows: list[dict], profiles: dict[str, dict]) -> str:
    items = [i for r in rows for i in rests_on_items(profiles.get(str(r["hardware"]), {}), str(r["mode"]))]
    return "; ".join(dict.fromkeys(items))


HELDOUT_FIGURES = {"ttft_ms_p95": ("p95_ttft_ms", "p95 TTFT"), "ttft_ms_p50": ("p50_ttft_ms", "p50 TTFT"), "e2e_ms_p95": ("p95_e2e_ms", "p95 E2E"),
                   "tpot_ms_p50": ("p50_tpot_ms", "p50 TPOT")}


def heldout_clause(slo: Slo, profiles: dict[str, dict], hardware: list[str]) -> str:
    """The engine model's held-out error on the SLO's first figure it records, for the answer's GPUs
    (profile provenance key `heldout_error`, from costmodel/schemas/profile.py heldout_error):
    "engine model's held-out p95 TTFT error on h200: median -8%, worst -22% (6 loads)", or "... not
    measured for this profile" where the profile does not carry it."""
    cols = [b.column for b in slo.bounds if b.column in HELDOUT_FIGURES] or ["ttft_ms_p95"]
    key, label = HELDOUT_FIGURES[cols[0]]
    parts, measured = [], False
    for h in dict.fromkeys(hardware):
        f = ((profiles.get(h) or {}).get("heldout_error") or {}).get("figures", {}).get(key)
        if isinstance(f, dict) and all(k in f for k in ("median_pct", "worst_pct", "n_loads")):
            parts.append(f"{h} median {f['median_pct']:+.0f}%, worst {f['worst_pct']:+.0f}% ({int(f['n_loads'])} loads)")
            measured = True
        else:
            parts.append(f"{h} not measured for this profile")
    if not parts:
        return ""
    if not measured:
        return f"engine model's held-out {label} error: not measured for this profile"
    return f"engine model's held-out {label} error: " + "; ".join(parts)


def decisions(a: Analysis, profiles: dict[str, dict]) -> list[Decision]:
    """One Decision per load asked about (Analysis.loads); `profiles` maps hardware -> costmodel.schemas.provenance.profile_provenance()."""
    best = a.best_records()
    cheapest = {float(r["qps"]): r for r in a.cheapest.to_dict("records")}
    out = []
    for q in a.loads or a.qps:
        rows = ranked_at(best, float(q))
        c = cheapest.get(float(q))
        if not rows or c is None or c["none_meets"]:
            out.append(Decision(q, False, "", "", "", 0, math.nan, math.nan, math.nan, "", math.nan, math.nan, ""))
            continue
        # the winner and its tie (tie_group: equal costs or overlapping intervals) in the order cheapest_per_qps lists them
        group = tie_group(rows)
        first = next(r for r in group if r["hardware"] == c["hardware"] and r["mode"] == c["mode"])
        group = [first] + [r for r in group if r is not first]
        names = tuple(fleet_name(r, profiles.get(str(r["hardware"]), {})) for r in group) if len(group) > 1 else ()
        inside = {option_name(r) for r in group}
        rest = [r for r in rows if option_name(r) not in inside]
        runner = rest[0] if rest else None
        usd = float(first["cost_usd_per_month"])
        more = float(runner["cost_usd_per_month"]) - usd if runner else math.nan
        pct = 100.0 * more / usd if runner and usd > 0 else math.nan
        cell = a.cells[(a.cells["qps"] == q) & (a.cells["hardware"] == first["hardware"]) & (a.cells["mode"] == first["mode"])] if not a.cells.empty else a.cells
        border = str(cell.iloc[0].get("borderline") or "") if not cell.empty and "borderline" in cell else ""
        out.append(Decision(q, True, _group_name(group, profiles), str(first["hardware"]), str(first["mode"]), int(first["gpus"]), usd,
                            usd / HOURS_PER_MONTH * HOURS_PER_YEAR, float(first.get("upfront_usd", 0.0) or 0.0),
                            " = ".join(fleet_name(r, profiles.get(str(r["hardware"]), {})) for r in tie_group(rest)) if runner else "", more, pct,
                            _rests_on(group, profiles), names, float(first.get("cost_usd_per_month_low", usd)), border,
                            heldout_clause(a.slo, profiles, [str(r["hardware"]) for r in group])))
    return out


def answer_lines(a: Analysis, profiles: dict[str, dict]) -> list[str]:
    """What plan prints last: one line per load, then the crossover (per GPU where there are several,
    then over all GPUs: the last line)."""
    lines = [d.text for d in decisions(a, profiles)]
    if a.crossover.status != "not-compared":
        if len(a.crossover_by_hardware) > 1:
            lines += [c.text for c in a.crossover_by_hardware.values() if c.status != "not-compared"]
        lines.append(a.crossover.text)
    return lines


def answer_frame(a: Analysis, profiles: dict[str, dict]) -> pd.DataFrame:
    """The answer as a CSV table (answer.csv; columns documented in costmodel/schemas/plan.py ANSWER_DOCS):
    one row per load, then the crossover rows, each with the words plan prints in `answer`."""
    rows = [{"question": f"cheapest at {d.qps:g} QPS", "qps": d.qps, "answer": d.text, "meets_slo": d.meets, "tie": d.tie,
             "tied_with": " | ".join(d.tied[1:]), "fleet": d.fleet, "cost_usd_per_month": d.cost_usd_per_month,
             "cost_usd_per_month_ci95_low": d.cost_usd_per_month_low if d.meets else math.nan, "cost_usd_per_year": d.cost_usd_per_year,
             "runner_up": d.runner_up, "runner_up_more_usd_per_month": d.runner_up_more_usd_per_month, "borderline": d.borderline,
             "rests_on": d.rests_on, "heldout_error": d.heldout} for d in decisions(a, profiles)]
    crossovers = list(a.crossover_by_hardware.values()) if len(a.crossover_by_hardware) > 1 else []
    for c in crossovers + [a.crossover]:
        if c.status == "not-compared":
            continue
        rows.append({"question": f"crossover ({c.scope})", "answer": c.text, "crossover_status": c.status, "crossover_qps": c.qps_estimate,
                     "crossover_qps_low": c.qps_low, "crossover_qps_high": c.qps_high, "crossover_qps_ci95_low": c.qps_ci95_low,
                     "crossover_qps_ci95_high": c.qps_ci95_high, "tie": c.tied_below,
                     "tied_with": " | ".join(o for p in c.per_qps if p["qps"] == c.qps_low and p["verdict"] == "tie"
                                             for o in p["diffusion_options"] + p["rival_options"])})
    return pd.DataFrame(rows)
