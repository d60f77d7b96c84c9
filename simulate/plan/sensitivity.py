"""How close is a plan's decision? Two answers, both from re-running the plan:

- replicates (`plan --seeds N`): the same plan under N seeds; per (GPU, mode, QPS) the spread of the
  fewest SLO-meeting replica count, and per QPS a confidence interval of the winner's monthly cost;
- sensitivity (`plan --sensitivity`): each input moved to the low and the high end of its range, the
  others as planned (one at a time): every GPU's hourly price, and each winning GPU's against each
  rival's at the ends that favour one and then the other (re-priced, no simulation), MTP
  acceptance, DiffusionGemma steps per canvas, prompt and output length, the pass-cost error of
  the profiles, and DiffusionGemma's prefill price alone (each re-planned). The decision is "robust" when the cheapest fleet's (GPU, mode) stays
  the same at every load; otherwise the table names the input, the end and the load where it flips.
  Each re-planned end bisects its own crossover too (as the plan did), so the table says how far the
  crossover moves with each input (the pass-cost error among them: the crossover is decided where the
  engine step's price grows with the batch). Price rows re-price the plan's points without
  simulating, so they leave the crossover unsearched.

Ranges: prices from the catalog's quoted ranges (pricing terms price_low/price_high, with sources);
the others are stated assumptions (RANGES), the pass-cost error the profiles' largest fit error.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from costmodel.costing import analyse, get_model, resolve_terms, with_seeds
from costmodel.errors import UserError
from costmodel.modes import get_mode, profile_parts
from simulate.plan import planner
from simulate.plan.api import PlanConfig, PlanOutcome, run_plan
from costmodel.intervals import t_quantile
from simulate.workload import DEFAULT_PROMPT

# The pass-cost error where a profile records no fit error (projected or composed tables): the profile
# projection's error per pass, H200 -> H100 against the measured H100 profile, -9.7% .. +16.7%
# (`costmodel profile project --compare`, commit df2932c), rounded up.
DEFAULT_PASS_ERROR = 0.17

# (low factor, high factor, why): stated assumptions, printed with the table
PART_KNOBS = ("MTP acceptance", "steps per canvas", "output length")  # the profile parts' edits (ProfilePart.what_ifs), in table order
RANGES = {
    "MTP acceptance": (0.85, 1.1, "per-position acceptance x0.85 .. x1.1 (capped at 0.99) around the profile's (a synthetic 0.8 prior by default) (A)"),
    "steps per canvas": (0.75, 1.25, "DiffusionGemma accept-calls per canvas x0.75 .. x1.25 around the profile's commit statistics (A)"),
    "prompt length": (0.5, 2.0, "prompt tokens x0.5 .. x2 around the workload's (A)"),
    # a new prompt shares its steps with canvases, so a joint fit prices it loosely: two fits of the same H200's
    # recorded steps priced a lone 1,024-token prefill at 29.6 and 82 ms (docs/measure.md)
    "DiffusionGemma prefill": (0.5, 2.0, "DiffusionGemma's prefill pass x0.5 .. x2 around the profile's: its prompts share their steps "
                                         "with canvases, and fits of one GPU's steps priced it x2.8 apart (A)"),
    "output length": (0.5, 2.0, "output tokens per regime x0.5 .. x2 around the profile's content lengths (A)"),
}


@dataclass
class Sensitivity:
    table: pd.DataFrame  # input, low_value, high_value, range_source, low/high_usd_per_month, low/high_winner, flips_at
    base_usd_per_month: float  # the decision's monthly cost summed over the planned loads
    base_winner: str
    verdict: str

    def to_dict(self) -> dict:
        return {"table": self.table.to_dict("records"), "base_usd_per_month": self.base_usd_per_month, "base_winner": self.base_winner,
                "verdict": self.verdict}

    @classmethod
    def from_dict(cls, d: dict) -> "Sensitivity":
        return cls(pd.DataFrame(d["table"]), float(d["base_usd_per_month"]), str(d["base_winner"]), str(d["verdict"]))


def _winner_name(r: dict) -> str:
    """'h200 / mtp', or a tie named whole: 'h200 / ar = h200 / mtp (tie)' (cheapest_per_qps's tied_with)."""
    tied = [t for t in str(r.get("tied_with") or "").split(", ") if t] if r.get("tie") else []
    return " = ".join([f"{r['hardware']} / {r['mode']}"] + tied) + (" (tie)" if tied else "")


def _winners(cheapest: pd.DataFrame) -> dict[float, str]:
    return {float(r["qps"]): ("none meets the SLO" if r["none_meets"] else _winner_name(r)) for r in cheapest.to_dict("records")}


def _options(name: str | None) -> set:
    return set((name or "").replace(" (tie)", "").split(" = "))


def _total(cheapest: pd.DataFrame) -> float:
    ok = cheapest[~cheapest["none_meets"]] if not cheapest.empty else cheapest
    return float(ok["cost_usd_per_month"].sum()) if not ok.empty else math.nan


def _winner_text(w: dict[float, str]) -> str:
    return "; ".join(f"{q:g} QPS {x}" for q, x in sorted(w.items()))


# ---- profile and workload perturbations (on the profile's JSON document) ----

def _scale_passes(doc: dict, f: float) -> None:
    """Every pass model's time x f."""
    for mode in doc["modes"].values():
        for pm in mode.get("pass_models", {}).values():
            _scale_pass_model(pm, f)


def _scale_canvas_prefill(doc: dict, f: float) -> None:
    """The prefill pass of the modes that decode canvases (DiffusionGemma) x f."""
    for name, mode in doc["modes"].items():
        sm = get_mode(name)
        if sm.decodes_canvases and sm.prefill_kind in mode.get("pass_models", {}):
            _scale_pass_model(mode["pass_models"][sm.prefill_kind], f)


def _scale_pass_model(pm: dict, f: float) -> None:
    """One pass model's time x f: linear coefficients, table values, overheads, the roofline ratio."""
    pm["coef"] = {k: v * f for k, v in pm.get("coef", {}).items()}
    if pm.get("median_x_roofline") is not None:
        pm["median_x_roofline"] *= f
    t = pm.get("table")
    if t:
        t["ms"] = (np.asarray(t["ms"], float) * f).tolist()
        t["token_ms"] = [v * f for v in t.get("token_ms", [])]
        t["overhead_ms"] = t.get("overhead_ms", 0.0) * f


def _scale_part(name: str) -> Callable[[dict, float], None]:
    """The profile-part edit `name` (a registered part's what_ifs, costmodel/modes), applied to a
    profile document; none when no registered part offers it."""
    part = next((p for p in profile_parts() if name in p.what_ifs()), None)
    if part is None:
        return lambda doc, f: None
    fn = part.what_ifs()[name]
    return lambda doc, f: fn(doc.get(part.key), f)


def pass_error(outcome: PlanOutcome) -> tuple[float, str]:
    """The largest cross-validated fit error (MAPE) of the profiles' pass models, or the default when none is recorded."""
    errs = [pm["diagnostics"]["cv_mape_pct"] for p in outcome.profiles.values() for m in p.to_dict()["modes"].values()
            for pm in m.get("pass_models", {}).values() if (pm.get("diagnostics") or {}).get("cv_mape_pct") is not None]
    if errs:
        return max(errs) / 100.0, f"the profiles' largest pass-model CV MAPE, {max(errs):.1f}%"
    return DEFAULT_PASS_ERROR, f"no fit error recorded (projected or composed tables): +-{DEFAULT_PASS_ERROR:.0%}, the profile projection's error range (A)"


def _with_profiles(cfg: PlanConfig, outcome: PlanOutcome, edit: Callable[[dict], None], d: Path) -> PlanConfig:
    paths = []
    for hw, p in outcome.profiles.items():
        doc = p.to_dict()
        edit(doc)
        path = d / f"{hw}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return replace(cfg, profiles=paths)


def _with_prompt(cfg: PlanConfig, f: float, d: Path) -> PlanConfig:
    doc = json.loads(Path(cfg.workload).read_text()) if cfg.workload else {}
    prompt = dict(doc.get("prompt_tokens", DEFAULT_PROMPT))
    if not isinstance(prompt, dict) or "median" not in prompt:
        raise UserError("the sensitivity to prompt length needs a lognormal prompt_tokens (median, sigma) in the workload", "drop --sensitivity or use such a workload")
    prompt["median"] = prompt["median"] * f
    path = d / "workload.json"
    path.write_text(json.dumps({**doc, "prompt_tokens": prompt}))
    return replace(cfg, workload=str(path))


# ---- the table ----

@dataclass
class _Row:
    input: str
    low_value: str
    high_value: str
    source: str
    ends: dict = field(default_factory=dict)  # "low"/"high" -> cheapest frame


def _repriced(outcome: PlanOutcome, prices: dict[str, float]) -> dict:
    """One end of a price row: the plan's points re-priced with `prices` (USD per GPU-hour by GPU), no simulation."""
    a = outcome.analysis
    cfg = replace(a.pricing, price_usd_per_gpu_hour={**a.pricing.price_usd_per_gpu_hour, **prices})
    specs = {h: p.hardware_spec() for h, p in outcome.profiles.items()}
    return _end(analyse(planner.points_frame(outcome.cells), a.slo, cfg, specs, a.qps, planner.cell_notes(outcome.cells), loads=a.loads),
                searched=False)


def _price_rows(outcome: PlanOutcome) -> list[_Row]:
    """Each GPU's price at both ends of its quoted range; then, per winning GPU and each rival, both
    at the ends that favour one and then the other (the winner high and the rival low is the
    closest the rival gets)."""
    a = outcome.analysis
    if get_model(a.pricing.model).owned:
        return []  # owned GPUs are priced by purchase, not by the hourly price ranges
    ranges = {}
    for hw in outcome.profiles:
        t, src = resolve_terms(hw, {})
        if "price_low_usd_per_gpu_hour" in t:
            ranges[hw] = (t["price_low_usd_per_gpu_hour"], t["price_high_usd_per_gpu_hour"], src["price_low_usd_per_gpu_hour"])
    rows = []
    for hw, (lo, hi, src) in ranges.items():
        row = _Row(f"{hw} price (USD per GPU-hour)", f"{lo:g}", f"{hi:g}", src)
        row.ends = {"low": _repriced(outcome, {hw: lo}), "high": _repriced(outcome, {hw: hi})}
        rows.append(row)
    winners = [h for h in dict.fromkeys(a.cheapest.get("hardware", pd.Series(dtype=str)).dropna()) if h in ranges]
    for w in winners:
        for o in (h for h in ranges if h != w):
            (wl, wh, _), (ol, oh, _) = ranges[w], ranges[o]
            row = _Row(f"{w} vs {o} price (each GPU at an end of its range)", f"{w} {wl:g}, {o} {oh:g}", f"{w} {wh:g}, {o} {ol:g}",
                       "the two GPUs' quoted ranges, at the ends that favour one and then the other")
            row.ends = {"low": _repriced(outcome, {w: wl, o: oh}), "high": _repriced(outcome, {w: wh, o: ol})}
            rows.append(row)
    return rows


def sensitivity(cfg: PlanConfig, outcome: PlanOutcome, progress: Callable[[str], None] | None = None) -> Sensitivity:
    """The decision of `outcome` (planned with `cfg`) against each input at both ends of its range."""
    say = progress or (lambda s: None)
    base_end = _end(outcome.analysis)
    base = base_end["cheapest"]  # the loads asked about (not the crossover search's QPS)
    rows = _price_rows(outcome)
    err, err_src = pass_error(outcome)
    edits = [("pass-cost error", 1 - err, 1 + err, err_src, lambda c, f, d: _with_profiles(c, outcome, lambda doc: _scale_passes(doc, f), d))]
    lo, hi, src = RANGES["DiffusionGemma prefill"]
    edits.append(("DiffusionGemma prefill", lo, hi, src, lambda c, f, d: _with_profiles(c, outcome, lambda doc: _scale_canvas_prefill(doc, f), d)))
    for name, fn in ((n, _scale_part(n)) for n in PART_KNOBS):
        lo, hi, src = RANGES[name]
        edits.append((name, lo, hi, src, lambda c, f, d, fn=fn: _with_profiles(c, outcome, lambda doc: fn(doc, f), d)))
    lo, hi, src = RANGES["prompt length"]
    edits.append(("prompt length", lo, hi, src, lambda c, f, d: _with_prompt(c, f, d)))
    for name, lo, hi, src, make in edits:
        row = _Row(name, f"x{lo:.3g}", f"x{hi:.3g}", src)
        for end, f in (("low", lo), ("high", hi)):
            say(f"sensitivity: {name} x{f:.3g} ({end} end): re-planning")
            with tempfile.TemporaryDirectory(prefix="costmodel-sens-") as d:
                row.ends[end] = _end(run_plan(make(replace(cfg, seed=outcome.settings.seed), f, Path(d))).analysis, searched=cfg.refine_crossover > 0)
        rows.append(row)
    return _summarise(base, rows, base_end["crossover_qps"] if cfg.refine_crossover else math.nan)


TIE = "a tie on monthly cost"


def _end(a, searched: bool = True) -> dict:
    """What the table needs of one end's analysis: the cheapest per QPS, every SLO-meeting option's
    monthly cost and, where this end bisected its own crossover (`searched`), its estimate (None: none bracketed)."""
    ok = a.cells[a.cells["meets_slo"].astype(bool)] if not a.cells.empty else a.cells
    cheapest = a.cheapest[a.cheapest["qps"].isin(a.loads)] if a.loads and not a.cheapest.empty else a.cheapest
    cross = getattr(a, "crossover", None)
    return {"cheapest": cheapest, "costs": {(float(r["qps"]), f"{r['hardware']} / {r['mode']}"): float(r["cost_usd_per_month"])
                                              for r in ok.to_dict("records")},
            "crossover_searched": searched, "crossover_qps": cross.qps_estimate if searched and cross is not None and cross.status == "bracketed" else None}


def _flip(q: float, old: str, new: str, end: str, value: str, data: dict) -> str:
    """'20 QPS: A -> B at the low end (x0.5): B $1,336 vs A $1,336/month (a tie ...)'."""
    c = data.get("cheapest")
    new_usd = c[(c["qps"] == q) & ~c["none_meets"]]["cost_usd_per_month"] if c is not None and not c.empty else pd.Series(dtype=float)
    old_usd = next((data.get("costs", {}).get((q, o)) for o in _options(old) if (q, o) in data.get("costs", {})), None)
    text = f"{q:g} QPS: {old} -> {new} at the {end} end ({value})"
    if "costs" not in data or new_usd.empty:
        return text + (f" ({TIE}: no winner)" if _options(old) & _options(new) else "")
    if old_usd is None:
        return text + f": {new} ${new_usd.iloc[0]:,.0f}/month, {old} no longer meets the SLO"
    tie = f" ({TIE}: no winner)" if new_usd.iloc[0] == old_usd or _options(old) & _options(new) else ""
    return text + f": {new} ${new_usd.iloc[0]:,.0f} vs {old} ${old_usd:,.0f}/month{tie}"


def crossover_qps_text(x) -> str:
    """A crossover estimate for a table cell: not bracketed (None), not searched (NaN), or the QPS."""
    return "not bracketed" if x is None else "-" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def _summarise(base: pd.DataFrame, rows: list[_Row], base_crossover: float | None = math.nan) -> Sensitivity:
    """`base_crossover`: the plan's own crossover estimate (None: not bracketed; NaN: not searched)."""
    bw, total = _winners(base), _total(base)
    recs, flips, ties = [], [], []
    moves = []  # (input, low-end crossover, high-end crossover) where the re-plans searched it
    for r in rows:
        rec = {"input": r.input, "low_value": r.low_value, "high_value": r.high_value, "range_source": r.source}
        where, cross = [], {}
        for end in ("low", "high"):
            data = r.ends[end] if isinstance(r.ends[end], dict) else {"cheapest": r.ends[end]}
            w = _winners(data["cheapest"])
            rec[f"{end}_usd_per_month"] = _total(data["cheapest"])
            rec[f"{end}_winner"] = _winner_text(w)
            searched = data.get("crossover_searched", False)
            cross[end] = data.get("crossover_qps") if searched else math.nan
            where += [_flip(q, bw.get(q), x, end, rec[end + "_value"], data) for q, x in sorted(w.items()) if bw.get(q) != x]
        rec["flips_at"] = "; ".join(where)
        for end in ("low", "high"):  # a number, or NaN where not searched or not bracketed (the verdict tells them apart)
            rec[f"{end}_crossover_qps"] = math.nan if cross[end] is None else cross[end]
        recs.append(rec)
        if not (isinstance(cross["low"], float) and math.isnan(cross["low"])):
            moves.append((r.input, cross["low"], cross["high"]))
        real = [w for w in where if TIE not in w]
        if real:
            flips.append(f"{r.input} ({real[0]})")
        elif where:
            ties.append(r.input)
    if flips:
        verdict = "decision flips with " + "; ".join(flips)
    elif ties:
        verdict = ("decision robust: the cheapest fleet's GPU holds at every load for every input at both ends of its range (its cost "
                   f"moves with the inputs); only the tie-break between equally priced modes on the same GPUs changes with {', '.join(ties)}")
    else:
        verdict = "decision robust: the cheapest fleet's GPU and mode stay the same at every load for every input at both ends of its range"
    if moves and base_crossover is not None and not (isinstance(base_crossover, float) and math.isnan(base_crossover)):
        found = [x for _, lo, hi in moves for x in (lo, hi) if x is not None]
        span = f"{min(found):.3g}-{max(found):.3g} QPS" if found else "no bracket"
        verdict += (f"; the crossover (~{base_crossover:.3g} QPS) moves over {span} across the inputs' ranges ("
                    + ", ".join(f"{name} {crossover_qps_text(lo)} / {crossover_qps_text(hi)}" for name, lo, hi in moves) + " QPS at the low / high end)")
    return Sensitivity(pd.DataFrame(recs), total, _winner_text(bw), verdict)


# ---- replicates ----

@dataclass
class Replicates:
    cells: pd.DataFrame  # hardware, mode, qps, replicas per seed, min/median/max
    decision: pd.DataFrame  # qps, winner per seed, monthly cost mean and 95% interval
    seeds: list[int]
    crossover_qps: list[float | None] = field(default_factory=list)  # each seed's crossover estimate (None: not bracketed)


def replicates(cfg: PlanConfig, outcome: PlanOutcome, n: int, progress: Callable[[str], None] | None = None) -> Replicates:
    """The plan under seeds seed, seed+1, ..., seed+n-1 (the first is `outcome`)."""
    if n < 1:
        raise UserError(f"--seeds {n} is below 1", "give the number of seeds to re-plan with, e.g. 5")
    say = progress or (lambda s: None)
    seeds = [outcome.settings.seed + i for i in range(n)]
    runs = [outcome]
    for s in seeds[1:]:
        say(f"replicate: seed {s}")
        runs.append(run_plan(replace(cfg, seed=s)))  # each seed bisects its own crossover
    keys = ["hardware", "mode", "qps"]
    grid = sorted(set(float(q) for q in cfg.qps))  # the loads every seed planned (each bisects its own crossover QPS besides)
    per = [r.analysis.cells[r.analysis.cells["qps"].isin(grid)].set_index(keys)["replicas"].rename(f"replicas_seed_{s}") for r, s in zip(runs, seeds)]
    cells = pd.concat(per, axis=1).reset_index()
    vals = cells[[c for c in cells.columns if c.startswith("replicas_seed_")]].astype(float)
    cells["replicas_min"], cells["replicas_median"], cells["replicas_max"] = vals.min(axis=1), vals.median(axis=1), vals.max(axis=1)
    rows = []
    for q in grid:
        costs, wins = [], []
        for r in runs:
            c = r.analysis.cheapest[r.analysis.cheapest["qps"] == q]
            if not c.empty and not c.iloc[0]["none_meets"]:
                costs.append(float(c.iloc[0]["cost_usd_per_month"]))
                wins.append(f"{_winner_name(c.iloc[0].to_dict())} x{int(c.iloc[0]['gpus'])}")
        mean = statistics.fmean(costs) if costs else math.nan
        half = t_quantile(len(costs) - 1) * statistics.stdev(costs) / math.sqrt(len(costs)) if len(costs) > 1 else math.nan
        rows.append({"qps": q, "seeds": len(runs), "winners": "; ".join(f"{w} ({wins.count(w)})" for w in dict.fromkeys(wins)),
                     "cost_usd_per_month_mean": mean, "cost_usd_per_month_ci95_low": mean - half, "cost_usd_per_month_ci95_high": mean + half,
                     "cost_usd_per_month_min": min(costs) if costs else math.nan, "cost_usd_per_month_max": max(costs) if costs else math.nan})
    return Replicates(cells, pd.DataFrame(rows), seeds, [r.analysis.crossover.qps_estimate for r in runs])


def plan_extras(cfg: PlanConfig, outcome: PlanOutcome, seeds: int, with_sensitivity: bool,
                progress: Callable[[str], None] | None = None) -> dict:
    """The extras `write_plan` stores (PlanOutcome.extras): replicates.csv and sensitivity.csv with their plan.json records."""
    out = {}
    if seeds > 1:
        rep = replicates(cfg, outcome, seeds, progress)
        out["replicates"] = (rep.cells, {"seeds": rep.seeds, "cells": rep.cells.to_dict("records"), "decision": rep.decision.to_dict("records"),
                                         "crossover_qps": rep.crossover_qps})
        outcome.analysis.crossover = with_seeds(outcome.analysis.crossover, rep.crossover_qps)
        out["replicates_decision"] = (rep.decision, rep.decision.to_dict("records"))
    if with_sensitivity:
        sens = sensitivity(cfg, outcome, progress)
        out["sensitivity"] = (sens.table, sens.to_dict())
    return out
