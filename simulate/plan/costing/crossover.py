"""The cheapest SLO-meeting option per QPS, and the crossover: the QPS above which DiffusionGemma
(mode diffusion) is no longer the cheapest SLO-meeting option against Gemma-4 AR and MTP.

Options are compared by monthly cost at the same QPS (serving the same requests). DiffusionGemma
"is the cheapest" at a QPS when its cheapest SLO-meeting option costs no more than the cheapest
SLO-meeting AR or MTP option, under the one tie rule every "cheapest" statement uses (RANK_COLUMNS:
monthly cost, then USD per 1M output tokens, then fewer GPUs), so the crossover text and the
cheapest-option table never disagree. How the crossover is determined:

1. bracket: walking up the evaluated QPS points, the last point where diffusion is the cheapest
   and the first point after it where it is not bound the crossover, q_low < q* <= q_high;
2. estimate: between the two, both monthly costs are interpolated linearly in QPS and q* is where
   they meet; when diffusion meets the SLO at neither end or not at q_high, only the bracket is given.
Evaluated points are the only evidence: add QPS points inside the bracket to narrow it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import pandas as pd

from costmodel.modes import all_modes


# The tie rule: options are ranked by these columns, in order (a stable sort keeps input order last).
RANK_COLUMNS = ("cost_usd_per_month", "cost_usd_per_mtok_output", "gpus")


def rank_options(options: pd.DataFrame) -> pd.DataFrame:
    """Cheapest first under the shared tie rule."""
    return options.sort_values([c for c in RANK_COLUMNS if c in options.columns], kind="mergesort")


def _sides() -> tuple[str, tuple[str, ...], str]:
    """(the diffusion mode, its rivals, the rivals' label, e.g. "AR/MTP"), from the mode registry."""
    modes = all_modes()
    subject = next(m.name for m in modes if m.is_diffusion)
    rivals = tuple(m for m in modes if not m.is_diffusion)
    return subject, tuple(m.name for m in rivals), "/".join(m.label for m in rivals)


def method_text() -> str:
    return (f"bracket = (last evaluated QPS where DiffusionGemma's cheapest SLO-meeting option costs <= the cheapest {_sides()[2]} one, "
            "first evaluated QPS above it where it does not]; estimate = where the two monthly costs, interpolated linearly in QPS "
            "between the bracket ends, are equal")


def best_per_cell(options: pd.DataFrame) -> pd.DataFrame:
    """The cheapest SLO-meeting row per (hardware, mode, qps); `options` needs hardware, mode, qps,
    meets_slo, cost_usd_per_month (plus whatever else to carry along)."""
    ok = options[options["meets_slo"].astype(bool)]
    if ok.empty:
        return ok
    ok = ok.sort_values(["qps", "hardware", "mode", "cost_usd_per_month", "gpus"], kind="mergesort")
    return ok.groupby(["hardware", "mode", "qps"], sort=True, as_index=False).head(1).reset_index(drop=True)


def cheapest_per_qps(options: pd.DataFrame, qps_values) -> pd.DataFrame:
    """One row per QPS: the cheapest SLO-meeting (hardware, mode), or none_meets=True."""
    best = best_per_cell(options)
    rows = []
    for q in sorted(set(float(x) for x in qps_values)):
        cand = rank_options(best[best["qps"] == q]) if not best.empty else best
        if cand is None or cand.empty:
            rows.append({"qps": q, "none_meets": True})
            continue
        r = cand.iloc[0]
        runner = cand.iloc[1] if len(cand) > 1 else None
        rows.append({
            "qps": q, "none_meets": False, "hardware": r["hardware"], "mode": r["mode"], "replicas": int(r["replicas"]), "gpus": int(r["gpus"]),
            "cost_usd_per_month": float(r["cost_usd_per_month"]), "cost_usd_per_mtok_output": float(r["cost_usd_per_mtok_output"]),
            "runner_up": f"{runner['hardware']} / {runner['mode']}" if runner is not None else "",
            "runner_up_cost_usd_per_month": float(runner["cost_usd_per_month"]) if runner is not None else math.nan,
        })
    return pd.DataFrame(rows)


@dataclass
class Crossover:
    scope: str  # "all hardware" or one hardware id
    status: str  # "bracketed" | "below-range" | "above-range" | "diffusion-never-meets" | "not-compared"
    qps_low: float | None  # last evaluated QPS where diffusion is the cheapest
    qps_high: float | None  # first evaluated QPS above it where it is not
    qps_estimate: float | None
    cheapest_above: str | None  # the option that beats diffusion at qps_high
    text: str
    method: str = field(default_factory=method_text)
    per_qps: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _best(best: pd.DataFrame, q: float, modes) -> tuple[float, str | None, tuple]:
    """(monthly cost, "mode on hardware", rank key) of the cheapest option of `modes` at `q`."""
    sel = best[(best["qps"] == q) & best["mode"].isin(modes)] if not best.empty else best
    if sel.empty:
        return math.inf, None, (math.inf,)
    r = rank_options(sel).iloc[0]
    key = tuple(float(r[c]) if c in r and pd.notna(r[c]) else math.inf for c in RANK_COLUMNS)
    return float(r["cost_usd_per_month"]), f"{r['mode']} on {r['hardware']}", key


def _money(x: float) -> str:
    return f"${x:,.0f}/month"


def _side(p: dict) -> str:
    """'diffusion on h200 $X/month vs ar on h200 $Y/month', naming what does not meet the SLO."""
    d = f"{p['diffusion_option']} {_money(p['diffusion_cost_usd_per_month'])}" if p["diffusion_option"] else "no diffusion option meets the SLO"
    o = f"{p['rival_option']} {_money(p['rival_cost_usd_per_month'])}" if p["rival_option"] else f"no {_sides()[2]} option meets the SLO"
    if p["rival_cost_usd_per_month"] == p["diffusion_cost_usd_per_month"]:
        win = "DiffusionGemma" if p["diffusion_cheapest"] else p["rival_option"]
        return f"{d} ties {o} on monthly cost; the tie goes to {win} (lower USD per 1M output tokens, then fewer GPUs)"
    return f"{d} vs {o}" if p["diffusion_cheapest"] else f"{o} vs {d}"


def find_crossover(options: pd.DataFrame, qps_values, hardware: str | None = None) -> Crossover:
    """The crossover over all hardware (`hardware=None`: each side takes its cheapest GPU) or on one GPU."""
    scope = hardware or "all hardware"
    opts = options if hardware is None else options[options["hardware"] == hardware]
    best = best_per_cell(opts)
    subject, rivals, rival_label = _sides()
    qs = sorted(set(float(x) for x in qps_values))
    per = []
    for q in qs:
        d, d_opt, d_key = _best(best, q, (subject,))
        o, o_opt, o_key = _best(best, q, rivals)
        per.append({"qps": q, "diffusion_cost_usd_per_month": d, "diffusion_option": d_opt, "rival_cost_usd_per_month": o,
                    "rival_option": o_opt, "diffusion_cheapest": math.isfinite(d) and d_key <= o_key})
    where = "" if hardware is None else f" on {hardware}"
    present = set(opts["mode"]) if not opts.empty else set()
    if subject not in present or not present & set(rivals):
        missing = "DiffusionGemma (mode diffusion)" if subject not in present else f"Gemma-4 {rival_label.replace('/', ' or ')}"
        return Crossover(scope, "not-compared", None, None, None, None, f"no crossover{where}: the results hold no {missing} points", per_qps=per)
    if not any(math.isfinite(p["diffusion_cost_usd_per_month"]) for p in per):
        return Crossover(scope, "diffusion-never-meets", None, qs[0] if qs else None, None, None,
                         f"DiffusionGemma meets the SLO{where} at none of the evaluated QPS ({_qlist(qs)})", per_qps=per)
    if not per[0]["diffusion_cheapest"]:
        p = per[0]
        later = [x["qps"] for x in per[1:] if x["diffusion_cheapest"]]
        note = f"; note: DiffusionGemma is the cheapest (or tied) at {_qlist(later)} QPS" if later else ""
        return Crossover(scope, "below-range", None, p["qps"], None, p["rival_option"],
                         f"DiffusionGemma is not the cheapest SLO-meeting option{where} even at the lowest evaluated QPS {p['qps']:g} "
                         f"({_side(p)}); the crossover, if any, lies below {p['qps']:g} QPS{note}", per_qps=per)
    k = 0
    while k + 1 < len(per) and per[k + 1]["diffusion_cheapest"]:
        k += 1
    again = [p["qps"] for p in per[k + 1:] if p["diffusion_cheapest"]]
    tail = f"; note: diffusion is the cheapest again at {_qlist(again)} QPS (costs are not monotone in QPS)" if again else ""
    ties = [p["qps"] for p in per[: k + 1] if p["diffusion_cost_usd_per_month"] == p["rival_cost_usd_per_month"]]
    tie_txt = f" (tied on monthly cost with {rival_label} at {_qlist(ties)} QPS, won on the tie rule: lower USD per 1M output tokens, then fewer GPUs)" if ties else ""
    if k == len(per) - 1:
        return Crossover(scope, "above-range", per[k]["qps"], None, None, None,
                         f"DiffusionGemma is the cheapest SLO-meeting option{where} at every evaluated QPS up to {per[k]['qps']:g}{tie_txt}; "
                         f"the crossover, if any, lies above {per[k]['qps']:g} QPS", per_qps=per)
    lo, hi = per[k], per[k + 1]
    est = None
    d0, d1, o0, o1 = lo["diffusion_cost_usd_per_month"], hi["diffusion_cost_usd_per_month"], lo["rival_cost_usd_per_month"], hi["rival_cost_usd_per_month"]
    if all(math.isfinite(x) for x in (d0, d1, o0, o1)):
        g0, g1 = o0 - d0, o1 - d1  # >= 0 at lo, <= 0 at hi (a cost tie broken by the rank rule)
        est = lo["qps"] + (hi["qps"] - lo["qps"]) * g0 / (g0 - g1) if g0 != g1 else hi["qps"]
    head = (f"at ~{est:.3g} QPS (linear interpolation of monthly costs)" if est is not None
            else f"somewhere in ({lo['qps']:g}, {hi['qps']:g}] QPS (not interpolated: a side meets the SLO at only one end)")
    text = (f"crossover{where}: DiffusionGemma stops being the cheapest SLO-meeting option {head}; bracket {lo['qps']:g}-{hi['qps']:g} QPS: "
            f"at {lo['qps']:g} QPS {_side(lo)}; at {hi['qps']:g} QPS {_side(hi)}{tie_txt if ties != [lo['qps']] else ''}{tail}")
    return Crossover(scope, "bracketed", lo["qps"], hi["qps"], est, hi["rival_option"], text, per_qps=per)


def _qlist(qs) -> str:
    return ", ".join(f"{q:g}" for q in qs)
