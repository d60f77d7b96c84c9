"""What a finance reviewer receives: the inputs every figure rests on (measured, prior, projected,
read from each profile's provenance, never hard-coded), the terms used, and CSVs a spreadsheet
reads as they are (TRUE/FALSE, plain decimals, cost and SLO columns first; the full table beside)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import atomic
from costmodel.schemas.dictionary import dictionary, dictionary_markdown, dictionary_paths, flat_frame
from costmodel.schemas.plan import ANSWER_DOCS
from costmodel.costing import Analysis, answer_frame, answer_lines
from reports.decision import rests_on
from reports.sources import Results

# The finance view: what a row is, whether it meets the SLO, what it costs and on what pricing, and
# the latency and throughput behind the verdict. Every other column is in the .full.csv.
FINANCE_COLUMNS = (
    "hardware", "mode", "qps", "meets_slo", "cheapest_at_qps", "slo", "slo_failures", "replicas", "gpus",
    "cost_usd_per_month", "cost_usd_per_year", "cost_usd_per_hour", "upfront_usd", "cost_usd_per_mtok_output", "cost_usd_per_mtok_total",
    "breakeven_usd_per_mtok_input", "breakeven_usd_per_mtok_output", "cost_usd_per_1k_requests", "energy_kwh_per_mtok_output",
    "pricing_basis", "rate_usd_per_gpu_hour", "electricity_usd_per_gpu_hour", "price_source", "power_source", "stable", "flag",
    "ttft_ms_p95", "e2e_ms_p95", "output_tokens_per_s", "gpu_busy_frac", "profile_id", "precision", "rests_on", "provenance",
)
# Rounding of the finance view (decimal places by column-name pattern, first match); the .full.csv keeps every digit.
ROUNDING = ((r"usd_per_(month|hour|year)$|^upfront_usd$", 2), (r"usd_per_(mtok|1k)|usd_per_gpu_hour", 4), (r"_ms_", 1), (r"^qps$", 3),
            (r"tokens_per_s|^throughput_rps$", 2), (r"_frac$", 3), (r"kwh|_kw$", 4), (r"_w_per_gpu$|power_w", 1))
# Blank on an unstable point (not steady state: its latencies and per-token figures describe a growing queue)
UNSTABLE_BLANK = r"_ms_|usd_per_(mtok|1k)|kwh_per_mtok|tokens_per_s|throughput_rps"
TERMS = {
    "QPS": "queries (requests) per second offered to the whole deployment, all replicas together",
    "SLO": "service-level objective: the latency bounds a configuration must meet (e.g. p95_ttft_ms<=1000), and it must be stable",
    "TTFT": "time to first token: from a request's arrival to its first output token (diffusion: its first committed canvas)",
    "E2E": "end-to-end latency: from a request's arrival to its last output token",
    "p95 / p99": "the latency 95% / 99% of requests stay under",
    "replica": "one copy of the model on one GPU; a configuration is N replicas behind a router",
    "stable": "the queue stays bounded at this load; an unstable point's latencies are not steady-state and never meet an SLO",
    "bracket": "the two evaluated QPS values the crossover lies between: DiffusionGemma is cheaper or tied at the lower one and costs more at the upper; plan bisects it with the simulator",
    "crossover": "the QPS above which DiffusionGemma costs more than the cheapest Gemma-4 AR/MTP SLO-meeting option (found by bisection along QPS)",
    "tie": "options whose monthly costs are within 1% of each other (whole GPUs: the same fleet costs the same); a tie names every option and has no winner",
}


@dataclass(frozen=True)
class Assumption:
    """One input the results rest on."""

    basis: str  # measured | prior | projected
    part: str  # e.g. "pass timings (diffusion, ar, mtp)"
    figure: str  # what the input is, with its numbers
    source: str
    hardware: str


def _weights(prov: dict) -> str:
    """The weights the pass timings were measured with ("random", "checkpoint"), from the run notes."""
    found = {w for kinds in prov.get("pass_models", {}).values() for d in kinds.values()
             for m in re.finditer(r'"weights": "(\w+)"|\bweights (\w+)\b', d.get("notes") or "") for w in m.groups() if w}
    return ", ".join(sorted(found))


def _composed(prov: dict) -> bool:
    """Pass times composed from operator timings (measure/ops) rather than timed whole."""
    return any('"composed": true' in (d.get("notes") or "") for kinds in prov.get("pass_models", {}).values() for d in kinds.values())


def _pass_rows(hw: str, prov: dict, all_prov: dict[str, dict]) -> list[Assumption]:
    by_kind: dict[str, list[str]] = {}
    for mode, kinds in prov.get("pass_models", {}).items():
        for k, d in kinds.items():
            by_kind.setdefault(d["kind"], []).append(f"{mode}/{k}")
    top = prov.get("provenance", {})
    rows = []
    if not by_kind:
        rows.append(Assumption(str(top.get("kind", "unknown")), "pass timings", f"profile {prov.get('profile_id')} not available to the report",
                               str(top.get("source", "")), hw))
    for kind, parts in by_kind.items():
        part = f"pass timings ({len(parts)} pass kinds)"
        if kind == "measured":
            w = _weights(prov)
            figure = (f"timed on {hw} with {w}-weight models" if w else f"timed on {hw}") + (
                " (timings are real; the weights' outputs are not)" if w == "random" else "") + (
                "; composed from per-operator timings, not a full-model run" if _composed(prov) else "")
            rows.append(Assumption("measured", part, figure, str(top.get("source", "")), hw))
        elif kind == "projected":
            origin = next((h for h, p in all_prov.items() if p.get("profile_id") and p["profile_id"] in str(top.get("source", ""))), None)
            w = _weights(all_prov[origin]) if origin else ""
            figure = f"projected to {hw} from {origin or 'another GPU'}" + (f" ({w}-weight models there)" if w else "")
            rows.append(Assumption("projected", part, figure, str(top.get("source", "")), hw))
        else:
            rows.append(Assumption("prior" if kind == "published" else kind, part, f"{kind}: {', '.join(parts)}", str(top.get("source", "")), hw))
    return rows


def _behaviour_rows(hw: str, prov: dict) -> list[Assumption]:
    rows = []
    cs = prov.get("commit_stats", {})
    if cs:
        kinds = sorted({d["kind"] for d in cs.values()})
        tpc = [d.get("tokens_per_call") for d in cs.values() if d.get("tokens_per_call") is not None]
        figure = f"{len(cs)} regimes" + (f", {min(tpc):g}-{max(tpc):g} tokens per call" if tpc else "")
        basis = "prior" if kinds == ["published"] else "measured" if kinds == ["measured"] else "/".join(kinds)
        srcs = sorted({str(d.get("source", "")) for d in cs.values()})
        rows.append(Assumption(basis, "DiffusionGemma commit statistics", figure + (" (the published prior)" if basis == "prior" else ""),
                               "; ".join(srcs), hw))
    a = prov.get("mtp_acceptance")
    if a:
        src = str(a.get("source", ""))
        synthetic = "synthetic" in src.lower() or "not measured" in str(a.get("notes", "")).lower()
        rate = re.search(r"\((0\.\d+)\)", src)
        figure = (f"{'synthetic ' if synthetic else ''}per-token acceptance {rate.group(1)}, " if rate else "") + \
            f"k={a.get('num_speculative_tokens')}, mean acceptance length {a.get('mean_acceptance_length', 0):.2f}"
        rows.append(Assumption("prior" if a["kind"] == "published" else a["kind"], "MTP acceptance", figure, src, hw))
    return rows


def assumptions(res: Results, a: Analysis) -> list[Assumption]:
    """Every input of the report, per GPU, from its profile's provenance and the pricing."""
    rows: list[Assumption] = []
    for hw, prov in res.profiles.items():
        rows += _pass_rows(hw, prov, res.profiles) + _behaviour_rows(hw, prov)
    for hw, p in a.prices.items():
        rows.append(Assumption("projected", "cost", f"{p.basis} pricing at ${p.rate_usd_per_gpu_hour:,.2f} per GPU-hour; latency, "
                               "throughput and cost simulated from the inputs above (costmodel simulate / plan)", p.rate_source, hw))
    return _merge(rows)


def _merge(rows: list[Assumption]) -> list[Assumption]:
    """One row per (basis, part, figure, source): the GPUs sharing it listed together."""
    merged: dict[tuple, list[str]] = {}
    for r in rows:
        merged.setdefault((r.basis, r.part, r.figure, r.source), []).append(r.hardware)
    order = {"measured": 0, "prior": 1, "projected": 2}
    return sorted((Assumption(b, p, f, s, ", ".join(dict.fromkeys(h))) for (b, p, f, s), h in merged.items()),
                  key=lambda r: order.get(r.basis, 3))


def spreadsheet_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Flat, with TRUE/FALSE for booleans and plain decimals (at most 6 decimal places, never an exponent)."""
    flat = flat_frame(df)
    out = {}
    for c in flat.columns:
        col = flat[c]
        if pd.api.types.is_bool_dtype(col) or (col.dtype == object and col.dropna().map(lambda v: isinstance(v, (bool, np.bool_))).all()
                                               and col.notna().any()):
            out[c] = col.map(lambda v: "" if pd.isna(v) else ("TRUE" if bool(v) else "FALSE"))
        elif pd.api.types.is_float_dtype(col):
            out[c] = col.map(_decimal)
        else:
            out[c] = col
    return pd.DataFrame(out, index=flat.index)


def _decimal(x) -> str:
    if x is None or not np.isfinite(x):
        return ""
    return np.format_float_positional(float(x), precision=6, unique=True, fractional=True, trim="-")


def budget_view(df: pd.DataFrame) -> pd.DataFrame:
    """The finance view's numbers as a budget reads them: rounded (ROUNDING), an unstable row's
    latencies and per-token costs blank, and every row that misses the SLO flagged in `flag`."""
    out = df.copy()
    stable = out["stable"].astype(bool) if "stable" in out else pd.Series(True, index=out.index)
    meets = out["meets_slo"].astype(bool) if "meets_slo" in out else stable
    why = out["slo_failures"].astype(str) if "slo_failures" in out else pd.Series("", index=out.index)
    out["flag"] = ["" if m else ("UNSTABLE: not steady state, latencies and per-token costs left blank" if not st else f"misses SLO: {w}")
                   for m, st, w in zip(meets, stable, why)]
    for c in out.columns:
        if not pd.api.types.is_float_dtype(out[c]):
            continue
        if re.search(UNSTABLE_BLANK, c):
            out.loc[~stable, c] = np.nan
        places = next((n for pat, n in ROUNDING if re.search(pat, c)), None)
        if places is not None:
            out[c] = out[c].round(places)
    return out


def write_finance_csv(df: pd.DataFrame, res: Results, a: Analysis, path: str | Path) -> list[Path]:
    """out.csv (finance view), out.full.csv (every column), out.assumptions.csv, out.answer.csv (the answer in
    plan's words and numbers) and the dictionary (its markdown ends with the answer and what it rests on)."""
    path = Path(path)
    stem = path.name[:-4] if path.name.lower().endswith(".csv") else path.name
    df = df.assign(precision=df["hardware"].map(lambda h: res.profiles.get(str(h), {}).get("precision", "")),
                   rests_on=[rests_on(res.profiles.get(str(h), {}), str(m)) for h, m in zip(df["hardware"], df["mode"])])
    budget = budget_view(df)
    full = spreadsheet_frame(df.assign(flag=budget["flag"]))
    view = spreadsheet_frame(budget)
    lead = [c for c in FINANCE_COLUMNS if c in view.columns]
    full = full[[c for c in lead if c in full.columns] + [c for c in full.columns if c not in lead]]
    full_path, assume_path = path.with_name(f"{stem}.full.csv"), path.with_name(f"{stem}.assumptions.csv")
    written = [atomic.write_csv(path, view[lead]), atomic.write_csv(full_path, full)]
    written.append(atomic.write_csv(assume_path, pd.DataFrame([asdict(r) for r in assumptions(res, a)], columns=list(Assumption.__dataclass_fields__))))
    answer_path = path.with_name(f"{stem}.answer.csv")
    answer = answer_frame(a, res.profiles)
    written.append(atomic.write_csv(answer_path, spreadsheet_frame(answer)))
    d = pd.concat([dictionary(full.columns), dictionary([c for c in answer.columns if c not in full.columns], ANSWER_DOCS)], ignore_index=True)
    dcsv, dmd = dictionary_paths(path)
    lines = "\n".join(f"- {x}" for x in answer_lines(a, res.profiles))
    md = dictionary_markdown(d, f"{path.name}, {full_path.name} and {answer_path.name}") + f"\n## The answer and what it rests on\n\n{lines}\n"
    written += [atomic.write_csv(dcsv, d), atomic.write_text(dmd, md)]
    return written

