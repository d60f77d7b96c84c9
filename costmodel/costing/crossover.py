"""The cheapest SLO-meeting option per QPS, and the crossover: the QPS above which DiffusionGemma
(the mode whose trait is_diffusion) costs more than the cheapest Gemma-4 AR or MTP option.

Options are compared by monthly cost at the same QPS (serving the same requests). Fleets are whole
GPUs, so two options often cost exactly the same (e.g. one GPU each): costs within TIE_FRAC of each
other are a tie, and every statement names all the tied options. USD per 1M output tokens, which
differs between tied fleets only by how many requests finished inside the simulated window, orders
the rows of a table (RANK_COLUMNS) but never decides a winner.

The crossover is a measured quantity, not a property of the QPS grid: at each QPS the verdict is
"cheaper", "tie" or "costs-more" (an AR/MTP option is cheaper); walking up the evaluated
QPS, the crossover lies between the last QPS of the first run of "cheaper" or "tie" verdicts and the
first "costs-more" QPS above it. `costmodel plan` bisects that bracket with the simulator
(simulate/plan/api.py) until it is narrower than CROSSOVER_TOLERANCE_FRAC of its upper end, and
`plan --seeds` adds the spread of the crossover over seeds. Everything that prints the crossover
prints `Crossover.text`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import pandas as pd

from costmodel.intervals import t_interval
from costmodel.modes import all_modes, mode_order


# The display order of options (a stable sort keeps input order last); winners are decided by cost alone.
RANK_COLUMNS = ("cost_usd_per_month", "cost_usd_per_mtok_output", "gpus")
TIE_FRAC = 0.01  # monthly costs within 1% of each other are a tie (whole GPUs: equal fleets cost exactly the same)
CROSSOVER_TOLERANCE_FRAC = 0.05  # plan bisects until the bracket is narrower than 5% of its upper end
# ... or narrower than this share of the crossover's 95% interval: the replications' spread, not the bisection, is what
# the interval reports, and a bracket well inside it moves the estimate by less than the interval already allows
INTERVAL_SHARE = 0.25
CHEAPER, TIE, COSTLIER, NONE = "cheaper", "tie", "costs-more", "none"  # DiffusionGemma against AR/MTP at one QPS


def ties(a_usd: float, b_usd: float) -> bool:
    """Two monthly costs that are the same within TIE_FRAC (both finite)."""
    return math.isfinite(a_usd) and math.isfinite(b_usd) and abs(a_usd - b_usd) <= TIE_FRAC * min(a_usd, b_usd)


def _sides() -> tuple[str, tuple[str, ...], str]:
    """(the diffusion mode, its rivals, the rivals' label, e.g. "AR/MTP"), from the mode registry."""
    modes = all_modes()
    subject = next(m.name for m in modes if m.is_diffusion)
    rivals = tuple(m for m in modes if not m.is_diffusion)
    return subject, tuple(m.name for m in rivals), "/".join(m.label for m in rivals)


def method_text() -> str:
    return (f"at each QPS the cheapest SLO-meeting fleet of DiffusionGemma and of {_sides()[2]} are compared by monthly cost "
            f"(within {TIE_FRAC:.0%}: a tie); the crossover lies between the last QPS where DiffusionGemma is cheaper or tied and the "
            f"first above it where it costs more; where a fleet's verdict is borderline over its replications the two costs' intervals "
            f"overlap (a tie), so the 95% interval runs from the last QPS where every verdict is settled to the first where DiffusionGemma "
            f"certainly costs more; the estimate is the midpoint of the bracket where the figures' means flip the verdict; `costmodel plan` "
            f"bisects the brackets with the simulator to {CROSSOVER_TOLERANCE_FRAC:.0%} of their upper end or {INTERVAL_SHARE:.0%} of the "
            f"95% interval, whichever is wider; --seeds widens the interval to "
            "the seeds' estimates")


def _first_per_cell(keys: list, costs: list, extra: list | None, rows) -> dict:
    """(hardware, mode, qps) -> the position of its cheapest row among `rows` (positions): the lowest cost (NaN last),
    then the lowest `extra` (the GPUs), then the first; a stable sort's first row per cell, without the sort."""
    out: dict = {}
    for i in rows:
        c = costs[i]
        rank = (c != c, c if c == c else 0.0, extra[i] if extra is not None else 0, i)
        k = keys[i]
        got = out.get(k)
        if got is None or rank < got[0]:
            out[k] = (rank, i)
    return {k: i for k, (_, i) in out.items()}


def _cell_choices(keys: list, costs: list, gpus: list, ok: list, verdicts: list | None, on_mean: list | None) -> tuple:
    """best_per_cell's choice on its columns as lists (rows in analyse's order): (the cells in (qps, hardware, mode) order,
    the position of each one's cheapest SLO-meeting row, of its cheapest row not settled to miss, of its cheapest row meeting
    the SLO on its figures' means; the last two None where the rows carry no verdicts)."""
    firsts = _first_per_cell(keys, costs, gpus, [i for i, x in enumerate(ok) if x])
    order = sorted(firsts, key=lambda k: (k[2], k[0], k[1]))
    if verdicts is None:
        return order, firsts, None, None
    low = _first_per_cell(keys, costs, None, [i for i, v in enumerate(verdicts) if v != "fail"])
    mean = _first_per_cell(keys, costs, None, [i for i, (o, v, m) in enumerate(zip(ok, verdicts, on_mean)) if o or (v == "borderline" and m)])
    return order, firsts, low, mean


def _cost_at(costs: list, found: dict, k, fallback: float) -> float:
    """The cost of the row `found` holds for cell k (_cell_choices), or `fallback` where it holds none or its cost is NaN."""
    i = found.get(k)
    return fallback if i is None or costs[i] != costs[i] else costs[i]


def best_per_cell(options: pd.DataFrame) -> pd.DataFrame:
    """The cheapest SLO-meeting row per (hardware, mode, qps), in (qps, hardware, mode) order; `options` needs hardware, mode,
    qps, meets_slo, cost_usd_per_month (plus whatever else to carry along). Where the rows carry their verdicts
    (slo_verdict: plan's replications), each row also gets the cell's cost interval: `cost_usd_per_month_low` and
    `replicas_low`, the cheapest count not settled to miss (below the settled one only where the counts between are
    borderline), and `cost_usd_per_month_mean`, the cheapest count meeting the SLO on its figures' means (the point
    estimate). The choice is made on these few columns in Python (_cell_choices) and the wide rows taken once (a plan's
    points carry ~100 columns: pandas' sorts, groupbys and merges over them cost ~50 ms a call)."""
    ok = options["meets_slo"].astype(bool).tolist()
    if not any(ok):
        return options[options["meets_slo"].astype(bool)]
    keys = list(zip(options["hardware"].tolist(), options["mode"].tolist(), options["qps"].tolist()))
    costs = options["cost_usd_per_month"].tolist()
    judged = "slo_verdict" in options.columns
    on_mean = options.get("slo_meets_on_mean", pd.Series(False, index=options.index)).fillna(False).astype(bool).tolist() if judged else None
    order, firsts, low, mean = _cell_choices(keys, costs, options["gpus"].tolist(), ok,
                                             options["slo_verdict"].astype(str).tolist() if judged else None, on_mean)
    best = options.iloc[[firsts[k] for k in order]].reset_index(drop=True)
    best = best.drop(columns=[c for c in ("cost_usd_per_month_low", "replicas_low", "cost_usd_per_month_mean") if c in best.columns])
    if not judged:
        return best.assign(cost_usd_per_month_low=best["cost_usd_per_month"], replicas_low=best["replicas"],
                           cost_usd_per_month_mean=best["cost_usd_per_month"])
    replicas = options["replicas"].to_numpy()
    best_costs = best["cost_usd_per_month"].tolist()
    best["cost_usd_per_month_low"] = [_cost_at(costs, low, k, c) for k, c in zip(order, best_costs)]
    best["replicas_low"] = replicas[[low.get(k, firsts[k]) for k in order]]
    best["cost_usd_per_month_mean"] = [_cost_at(costs, mean, k, c) for k, c in zip(order, best_costs)]
    return best


def best_cell_records(rows: list[dict]) -> list[dict]:
    """best_records of judged rows given as records (priced, with meets_slo, slo_verdict and slo_meets_on_mean, in analyse's
    order): the same rows and figures, chosen by the same _cell_choices, without a frame (a plan's crossover search)."""
    ok = [bool(r["meets_slo"]) for r in rows]
    if not any(ok):
        return []
    keys = [(r["hardware"], r["mode"], r["qps"]) for r in rows]
    costs = [r["cost_usd_per_month"] for r in rows]
    order, firsts, low, mean = _cell_choices(keys, costs, [r["gpus"] for r in rows], ok, [str(r["slo_verdict"]) for r in rows],
                                             [bool(r.get("slo_meets_on_mean")) for r in rows])
    out = []
    for k in order:
        b = rows[firsts[k]]
        c = b["cost_usd_per_month"]
        out.append({**{col: b[col] for col in _BEST_COLUMNS if col in b},
                    "cost_usd_per_month_low": _cost_at(costs, low, k, c), "cost_usd_per_month_mean": _cost_at(costs, mean, k, c)})
    return out


def overlaps(a_low: float, a_high: float, b_low: float, b_high: float) -> bool:
    """Two cost intervals that overlap, or whose nearest ends tie (TIE_FRAC): no winner between them."""
    if not all(math.isfinite(x) for x in (a_low, a_high, b_low, b_high)):
        return False
    return (a_low <= b_high and b_low <= a_high) or ties(a_high, b_low) or ties(b_high, a_low)


def option_name(r) -> str:
    return f"{r['hardware']} / {r['mode']}"


def _interval(r) -> tuple[float, float]:
    hi = float(r["cost_usd_per_month"])
    lo = r.get("cost_usd_per_month_low", hi) if hasattr(r, "get") else hi
    lo = hi if lo is None or not math.isfinite(float(lo)) else float(lo)
    return lo, hi


def tie_group(cand) -> list:
    """The cheapest option of `cand` (ranked rows of one QPS: a frame, or its records) and every option
    tied with it: the same monthly cost within TIE_FRAC, or a cost interval overlapping its interval (a borderline count)."""
    rows = [x for _, x in cand.iterrows()] if isinstance(cand, pd.DataFrame) else list(cand)
    first = rows[0]
    lo, hi = _interval(first)
    group = [x for x in rows if ties(float(x["cost_usd_per_month"]), hi) or overlaps(*_interval(x), lo, hi)]
    group.sort(key=lambda x: (int(x["gpus"]), mode_order(x["mode"])))  # a tie is listed in registry order, not by a noise tie-break
    return group


def ranked_at(best: list[dict], q: float) -> list[dict]:
    """best_per_cell's records at QPS `q`, cheapest first (_rank_key), ties in input order."""
    return sorted((r for r in best if float(r["qps"]) == q), key=_rank_key)


def cheapest_per_qps(options: pd.DataFrame, qps_values, best: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per QPS: the cheapest SLO-meeting (hardware, mode), every option tied with it
    (`tied_with`; tie_group), the first option that costs more (runner-up), or none_meets=True.
    `best`: best_per_cell(options) when already computed."""
    best = best_per_cell(options) if best is None else best
    recs = best.to_dict("records")
    rows = []
    for q in sorted(set(float(x) for x in qps_values)):
        cand = ranked_at(recs, q)
        if not cand:
            rows.append({"qps": q, "none_meets": True, "tie": False, "tied_with": ""})
            continue
        group = tie_group(cand)
        r, tied = group[0], group[1:]
        names = {option_name(x) for x in group}
        rest = [x for x in cand if option_name(x) not in names]
        runner = rest[0] if rest else None
        rows.append({
            "qps": q, "none_meets": False, "hardware": r["hardware"], "mode": r["mode"], "replicas": int(r["replicas"]), "gpus": int(r["gpus"]),
            "cost_usd_per_month": float(r["cost_usd_per_month"]), "cost_usd_per_month_low": _interval(r)[0],
            "cost_usd_per_mtok_output": float(r["cost_usd_per_mtok_output"]),
            "tie": bool(tied), "tied_with": ", ".join(option_name(x) for x in tied),
            "runner_up": " = ".join(option_name(x) for x in tie_group(rest)) if runner is not None else "",  # a tied runner-up names every option
            "runner_up_cost_usd_per_month": float(runner["cost_usd_per_month"]) if runner is not None else math.nan,
        })
    return pd.DataFrame(rows)


@dataclass
class Crossover:
    scope: str  # "all hardware" or one hardware id
    status: str  # "bracketed" | "below-range" | "above-range" | "diffusion-never-meets" | "not-compared"
    qps_low: float | None  # the last QPS (of the first run from the bottom) where diffusion is cheaper or tied
    qps_high: float | None  # the first QPS above it where an AR/MTP option is cheaper
    qps_estimate: float | None  # the bracket's midpoint
    cheapest_above: str | None  # the option that beats diffusion at qps_high
    text: str
    method: str = field(default_factory=method_text)
    per_qps: list[dict] = field(default_factory=list)
    tied_below: bool = False  # below the crossover diffusion only ties (is never strictly cheaper) at the evaluated QPS
    seeds_qps: list[float] = field(default_factory=list)  # the crossover's estimate per seed (plan --seeds)
    qps_ci95_low: float | None = None  # 95% interval of the estimate over the seeds
    qps_ci95_high: float | None = None
    detail: str = ""  # what holds below and above the bracket (the text after the interval)
    estimate_low: float | None = None  # the point estimate's bracket: where the figures' means flip the verdict
    estimate_high: float | None = None
    refine: list = field(default_factory=list)  # (low, high) QPS gaps a bisection would narrow: the estimate's and the interval's ends

    def to_dict(self) -> dict:
        return asdict(self)

    def gaps_to_refine(self) -> list[tuple[float, float]]:
        """The brackets of `refine` a plan still bisects, widest first: wider than CROSSOVER_TOLERANCE_FRAC of
        their upper end and than INTERVAL_SHARE of the 95% interval (a bracket inside a quarter of the
        interval moves the estimate and the interval's ends by less than the replications' spread)."""
        lo_ci = self.qps_ci95_low if self.qps_ci95_low is not None else (self.qps_low or 0.0)
        hi_ci = self.qps_ci95_high if self.qps_ci95_high is not None else (self.qps_high or 0.0)
        floor = INTERVAL_SHARE * max(0.0, hi_ci - lo_ci)
        return sorted(((lo, hi) for lo, hi in self.refine if hi - lo > max(CROSSOVER_TOLERANCE_FRAC * hi, floor)), key=lambda g: g[0] - g[1])

    @property
    def interval_text(self) -> str:
        """'~2.6 QPS (95% interval 1.9-3.3 QPS)', or '' where there is no estimate. The interval runs
        from the last QPS up to which DiffusionGemma is cheaper or tied in every verdict's interval
        to the first above which it costs more in every one (with --seeds, widened to every seed's estimate)."""
        if self.status != "bracketed":
            return ""
        lo = self.qps_ci95_low if self.qps_ci95_low is not None else self.qps_low
        hi = self.qps_ci95_high if self.qps_ci95_high is not None else self.qps_high
        seeds = f" over {len(self.seeds_qps)} seeds" if len(self.seeds_qps) > 1 else ""
        return f"~{self.qps_estimate:.3g} QPS (95% interval {lo:.3g}-{hi:.3g} QPS{seeds})"


def _rank_key(r: dict) -> tuple:
    """An option's place in display order (RANK_COLUMNS, a missing figure last): ranked on records, not by a frame's
    sort, because a plan's rows carry ~100 columns and pandas re-takes all of them per sort."""
    return tuple(math.inf if not isinstance(r.get(c), (int, float)) or not math.isfinite(float(r[c])) else float(r[c])
                 for c in RANK_COLUMNS if c in r)


def _best(rows: list[dict], modes) -> tuple[float, list[str], float, float]:
    """(monthly cost, every "mode on hardware" tied with the cheapest (tie_group), the lowest cost any
    option's interval reaches, the cheapest cost on the figures' means) of the cheapest option of `modes`
    among `rows` (best_per_cell's records at one QPS)."""
    sel = sorted((r for r in rows if r["mode"] in modes), key=_rank_key)
    if not sel:
        return math.inf, [], math.inf, math.inf
    group = tie_group(sel)
    hi = float(sel[0]["cost_usd_per_month"])
    low = min(float(r.get("cost_usd_per_month_low", hi)) for r in sel)
    mean = min(float(r.get("cost_usd_per_month_mean", hi)) for r in sel)
    return hi, [f"{r['mode']} on {r['hardware']}" for r in group], low, mean


def verdict(d_usd: float, o_usd: float, d_low: float | None = None, o_low: float | None = None) -> str:
    """DiffusionGemma at one QPS: cheaper, a tie, costs more than AR/MTP, or none (no option of either
    side meets the SLO). With cost intervals ([d_low, d_usd], [o_low, o_usd]: borderline counts)
    that overlap, a tie: the replications do not settle which is cheaper."""
    if not math.isfinite(d_usd) and not math.isfinite(o_usd):
        return NONE
    d_low = d_usd if d_low is None else d_low
    o_low = o_usd if o_low is None else o_low
    if ties(d_usd, o_usd) or overlaps(d_low, d_usd, o_low, o_usd):
        return TIE
    return CHEAPER if d_usd < o_usd else COSTLIER


def _money(x: float) -> str:
    return f"${x:,.0f}/month"


def _side(p: dict) -> str:
    """'diffusion on h200 $X/month vs ar on h200 $Y/month', or the tie naming every tied option."""
    rival_label = _sides()[2]
    d_opts, o_opts = p["diffusion_options"], p["rival_options"]
    if p["verdict"] == TIE:
        return f"a tie at {_money(p['diffusion_cost_usd_per_month'])}: {' = '.join(d_opts + o_opts)}"
    if not d_opts or not o_opts:
        only = f"{_named(d_opts)} {_money(p['diffusion_cost_usd_per_month'])}" if d_opts else f"{_named(o_opts)} {_money(p['rival_cost_usd_per_month'])}"
        return f"only {only} meets the SLO; no {'DiffusionGemma' if not d_opts else rival_label} option does"
    d, o = f"{_named(d_opts)} {_money(p['diffusion_cost_usd_per_month'])}", f"{_named(o_opts)} {_money(p['rival_cost_usd_per_month'])}"
    if p["verdict"] == CHEAPER:
        return f"{d} {'is' if len(d_opts) == 1 else 'are'} cheaper than {o}"
    return f"{o} {'is' if len(o_opts) == 1 else 'are'} cheaper than {d}"


def _named(opts: list[str]) -> str:
    """One option, or every option of a tie group (none picked by a tie-break)."""
    return opts[0] if len(opts) == 1 else f"{' = '.join(opts)} (tied)"


# what per_qps reads of best_per_cell's rows (records of these columns only: a plan's points carry ~100)
_BEST_COLUMNS = ("hardware", "mode", "qps", "cost_usd_per_month_low", "cost_usd_per_month_mean") + RANK_COLUMNS


def best_records(options: pd.DataFrame) -> list[dict]:
    """best_per_cell's rows as records of the columns the crossover reads: computed once for every
    scope of a plan's analysis (a cell's best row does not depend on which other cells are present)."""
    best = best_per_cell(options)
    return best[[c for c in best.columns if c in _BEST_COLUMNS]].to_dict("records")


def per_qps(options: pd.DataFrame, qps_values, hardware: str | None = None, best: list[dict] | None = None) -> list[dict]:
    """Per evaluated QPS: each side's cheapest monthly cost, options and interval, and the verdict
    (`verdict`, on the intervals) and the point estimate's (`verdict_mean`, on the figures' means).
    `best`: best_records(options) when already computed (filtered here to `hardware`)."""
    if best is None:
        best = best_records(options if hardware is None else options[options["hardware"] == hardware])
    elif hardware is not None:
        best = [r for r in best if r["hardware"] == hardware]
    at: dict = {}
    for r in best:
        at.setdefault(float(r["qps"]), []).append(r)
    subject, rivals, _ = _sides()
    out = []
    for q in sorted(set(float(x) for x in qps_values)):
        here = at.get(q, [])
        d, d_opts, d_low, d_mean = _best(here, (subject,))
        o, o_opts, o_low, o_mean = _best(here, rivals)
        v = verdict(d, o, d_low, o_low)
        out.append({"qps": q, "diffusion_cost_usd_per_month": d, "diffusion_options": d_opts, "rival_cost_usd_per_month": o,
                    "rival_options": o_opts, "verdict": v, "diffusion_cost_usd_per_month_low": d_low, "rival_cost_usd_per_month_low": o_low,
                    "settled": v != TIE or (d_low == d and o_low == o), "verdict_mean": verdict(d_mean, o_mean)})
    return out


def find_crossover(options: "pd.DataFrame | list[dict]", qps_values, hardware: str | None = None, best: list[dict] | None = None) -> Crossover:
    """The crossover over all hardware (`hardware=None`: each side takes its cheapest GPU) or on one GPU.
    `best`: best_records(options) when already computed for another scope (the same answer, sooner); with it, `options`
    may be the judged rows as records (best_cell_records's)."""
    scope = hardware or "all hardware"
    qps_values = sorted(set(float(x) for x in qps_values))
    subject, rivals, rival_label = _sides()
    if best is None:
        options = options[options["qps"].isin(qps_values)]
    else:
        wanted = set(qps_values)
        best = [r for r in best if float(r["qps"]) in wanted]
    per = per_qps(options, qps_values, hardware, best)
    qs = [p["qps"] for p in per]
    where = "" if hardware is None else f" on {hardware}"
    rows = ([(r["hardware"], r["mode"], r["qps"]) for r in options] if isinstance(options, list)  # records (best given)
            else zip(options["hardware"].tolist(), options["mode"].tolist(), options["qps"].tolist()))  # lists: a Series iterates slowly
    present = {m for h, m, q in rows if (hardware is None or h == hardware) and (best is None or float(q) in wanted)}
    if subject not in present or not present & set(rivals):
        missing = "DiffusionGemma (mode diffusion)" if subject not in present else f"Gemma-4 {rival_label.replace('/', ' or ')}"
        return Crossover(scope, "not-compared", None, None, None, None, f"no crossover{where}: the results hold no {missing} points", per_qps=per)
    if not any(math.isfinite(p["diffusion_cost_usd_per_month"]) for p in per):
        return Crossover(scope, "diffusion-never-meets", None, qs[0] if qs else None, None, None,
                         f"DiffusionGemma meets the SLO{where} at none of the evaluated QPS ({_qspan(qs)})", per_qps=per)
    nobody = [p["qps"] for p in per if p["verdict"] == NONE]
    gap = f"; no option meets the SLO at {_qlist(nobody)} QPS" if nobody else ""
    every, per = per, [p for p in per if p["verdict"] != NONE]
    pays = [p["verdict"] in (CHEAPER, TIE) for p in per]
    if not pays[0]:
        p = per[0]
        later = [x["qps"] for x, ok in zip(per[1:], pays[1:]) if ok]
        note = f"; note: DiffusionGemma is cheaper or tied at {_qlist(later)} QPS" if later else ""
        return Crossover(scope, "below-range", None, p["qps"], None, _named(p["rival_options"]) if p["rival_options"] else None,
                         f"DiffusionGemma costs more than {rival_label}{where} even at the lowest evaluated QPS {p['qps']:g} ({_side(p)}); "
                         f"the crossover, if any, lies below {p['qps']:g} QPS{note}{gap}", per_qps=every)
    k = 0
    while k + 1 < len(per) and pays[k + 1]:
        k += 1
    tied_below = all(p["verdict"] == TIE for p in per[: k + 1])
    again = [p["qps"] for p, ok in zip(per[k + 1:], pays[k + 1:]) if ok]
    tail = (f"; note: DiffusionGemma is cheaper or tied again at {_qlist(again)} QPS (costs are not monotone in QPS)" if again else "") + gap
    below = _below_text(per[: k + 1], rival_label)
    if k == len(per) - 1:
        return Crossover(scope, "above-range", per[k]["qps"], None, None, None,
                         f"no crossover{where} up to {per[k]['qps']:g} QPS: {below} at every evaluated QPS "
                         f"({_qlist(p['qps'] for p in per)}); the crossover, if any, lies above {per[k]['qps']:g} QPS{gap}", per_qps=every, tied_below=tied_below)
    return _compose(_bracketed(scope, per, every, k, below, tail, tied_below))


def _bracketed(scope: str, per: list[dict], every: list[dict], k: int, below: str, tail: str, tied_below: bool) -> Crossover:
    """The crossover between per[k] (the last QPS where DiffusionGemma pays) and per[k + 1]: its 95% interval from
    the last QPS where every verdict is settled, its estimate where the figures' means flip the verdict, and the
    brackets the plan's search refines with the simulator."""
    lo, hi = per[k], per[k + 1]
    j = 0
    while j <= k and per[j]["settled"]:
        j += 1
    low_end = per[j - 1]["qps"] if j > 0 else None  # the last QPS up to which every verdict is settled (cheaper or an exact tie)
    m = 0
    while m + 1 < len(per) and per[m + 1]["verdict_mean"] in (CHEAPER, TIE):
        m += 1
    est_lo, est_hi = (per[m]["qps"], per[m + 1]["qps"]) if per[0]["verdict_mean"] in (CHEAPER, TIE) and m + 1 < len(per) else (lo["qps"], hi["qps"])
    est_lo, est_hi = max(est_lo, low_end if low_end is not None else est_lo), min(est_hi, hi["qps"])
    if est_lo >= est_hi:
        est_lo, est_hi = lo["qps"], hi["qps"]
    refine = [(est_lo, est_hi), (lo["qps"], hi["qps"])]
    if low_end is not None and j <= k:
        refine.append((low_end, per[j]["qps"]))
    elif low_end is None:
        refine.append((0.0, per[0]["qps"]))  # unsettled already at the lowest QPS: the interval's low end lies below it
    unsettled = [p["qps"] for p in per[: k + 1] if not p["settled"]]
    note = (f"; at {_qspan(unsettled)} QPS the replications leave a fleet borderline, so the costs' intervals overlap (a tie)"
            if unsettled else "")
    c = Crossover(scope, "bracketed", lo["qps"], hi["qps"], (est_lo + est_hi) / 2, _named(hi["rival_options"]) if hi["rival_options"] else None, "",
                  per_qps=every, tied_below=tied_below, detail=f"below it {below}{note}; above it {_side(hi)} at {hi['qps']:g} QPS{tail}",
                  qps_ci95_low=low_end if low_end is not None else 0.0, qps_ci95_high=hi["qps"], estimate_low=est_lo, estimate_high=est_hi,
                  refine=refine)
    return c


def _below_text(per: list[dict], rival_label: str) -> str:
    """What holds below the crossover: 'DiffusionGemma ties with AR/MTP' or 'is cheaper (or tied)'."""
    if all(p["verdict"] == TIE for p in per):
        return f"DiffusionGemma only ties with {rival_label} (same monthly cost{_fleets(per[-1])})"
    if all(p["verdict"] == CHEAPER for p in per):
        return "DiffusionGemma is cheaper"
    tied = [p["qps"] for p in per if p["verdict"] == TIE]
    return f"DiffusionGemma is cheaper or tied (tied at {_qlist(tied)} QPS)"


def _fleets(p: dict) -> str:
    return f": {' = '.join(p['diffusion_options'] + p['rival_options'])} at {p['qps']:g} QPS" if p["verdict"] == TIE else ""


def _compose(c: Crossover) -> Crossover:
    where = "" if c.scope == "all hardware" else f" on {c.scope}"
    c.text = f"crossover{where}: DiffusionGemma costs more above {c.interval_text}: {c.detail}"
    return c


def with_seeds(c: Crossover, seeds_qps: list[float]) -> Crossover:
    """The crossover with its estimate per seed (plan --seeds): the interval widened to a 95%
    interval of the seeds' mean (t-interval) and to every seed's estimate, written into the text."""
    vals = [float(q) for q in seeds_qps if q is not None and math.isfinite(q)]
    if c.status != "bracketed" or len(vals) < 2:
        return replace(c, seeds_qps=vals)
    low, high = t_interval(vals)
    lo = c.qps_ci95_low if c.qps_ci95_low is not None else c.qps_low
    hi = c.qps_ci95_high if c.qps_ci95_high is not None else c.qps_high
    return _compose(replace(c, seeds_qps=vals, qps_ci95_low=min(low, lo, *vals), qps_ci95_high=max(high, hi, *vals)))


def _qlist(qs) -> str:
    return ", ".join(f"{q:g}" for q in qs)


def _qspan(qs) -> str:
    """The evaluated QPS, listed when few, else as their range."""
    return _qlist(qs) if len(qs) <= 6 else f"{len(qs)} loads, {min(qs):g}-{max(qs):g}"
