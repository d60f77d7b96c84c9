"""Self-contained HTML report, answer first: the cheapest SLO-meeting fleet per load with its
monthly and annual cost, the runner-up and what the winner rests on; then interactive charts
(plotly, its JavaScript inlined: nothing is fetched, the page works offline); then the inputs and
their provenance (prices and sources, the power model, measured / projected / prior per profile
part); then the details (every cell, the terms, the column dictionary). The crossover section
appears only where both sides were evaluated."""

from __future__ import annotations

import html
import math
from functools import lru_cache

import pandas as pd
from plotly.offline import get_plotlyjs

from costmodel import __version__
from costmodel.modes import mode_order
from costmodel.schemas.dictionary import dictionary
from costmodel.schemas.provenance import provenance_kinds
from costmodel.timestamps import now_iso
from costmodel.costing import HOURS_PER_MONTH, SOURCES, Analysis
from reports import charts
from reports.decision import decisions, seed_intervals, sensitivity_view
from reports.finance import TERMS, assumptions
from reports.sources import Results

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1180px;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.6rem 0}th,td{border:1px solid #d6d6d6;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}td.t,th.t{text-align:left}td.t:first-child{white-space:nowrap}tr.win td{background:#eaf6ea;font-weight:600}tr.tie td{background:#fff6d6;font-weight:600}tr.miss td{color:#999}
.callout{background:#fff8e1;border-left:4px solid #f2c14e;padding:.6rem 1rem;margin:1rem 0}
dl.terms{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;font-size:.9rem}dl.terms dd{margin:0}
.muted{color:#666;font-size:.85rem}figure{margin:1.2rem 0}
.answer{background:#f4f9f4;border:1px solid #cfe6cf;border-radius:6px;padding:.4rem 1.2rem 1rem}.answer h2{margin-top:.6rem;border:none}.lead{font-size:1.15rem;font-weight:600}.verdict{font-weight:600;color:#7a4b00}table.decision td,table.decision th{font-size:.95rem}
.kind{display:inline-block;padding:0 .4rem;border-radius:3px;font-size:.8rem}
.k-measured{background:#d7f0d7}.k-projected{background:#dde8fb}.k-published{background:#fbeedd}.k-roofline{background:#f6dada}.k-endpoint{background:#e8e0f5}
"""
KIND_MEANING = {
    "measured": "timed on the target GPU by `costmodel measure` and fitted",
    "projected": "measured on another GPU and carried over through the engine efficiency",
    "published": "taken from a publication (cited), not measured by this project",
    "roofline": "not measured: the physical limit divided by an assumed engine efficiency",
    "endpoint": "measured end-to-end against a live serving endpoint",
}


def e(x) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v, col: str) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, bool) or col in ("meets_slo", "cheapest_at_qps", "stable"):
        return "yes" if bool(v) else "no"
    if isinstance(v, float):
        if "usd" in col:
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3f}"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return e(v)


def _table(df: pd.DataFrame, cols: list[tuple[str, str]], row_class=None) -> str:
    """An HTML table of `cols` (column, header); text columns align left, numbers right."""
    text = {c for c, _ in cols if c in df and df[c].map(lambda v: isinstance(v, str)).any()}
    cls = lambda c: ' class="t"' if c in text else ""
    head = "".join(f"<th{cls(c)}>{e(label)}</th>" for c, label in cols)
    body = []
    for r in df.to_dict("records"):
        tds = "".join(f"<td{cls(c)}>{_fmt(r.get(c), c)}</td>" for c, _ in cols)
        body.append(f'<tr class="{row_class(r) if row_class else ""}">{tds}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kind(kind) -> str:
    """A provenance kind as a coloured tag (free text, e.g. a simulator's summary, untagged)."""
    k = str(kind)
    return f'<span class="kind k-{k}">{e(k)}</span>' if k in KIND_MEANING else f'<span class="kind">{e(k)}</span>'


def _assumptions(res: Results, a: Analysis) -> str:
    cfg = a.pricing
    parts = ["<h2 id=\"assumptions\">Assumptions and provenance</h2>", "<h3>Prices</h3>"]
    rows = []
    for h, p in a.prices.items():
        rows.append({"hardware": h, "basis": p.basis, "rate_usd": p.rate_usd_per_gpu_hour, "source": p.rate_source,
                     "power": p.active_power_w, "psource": p.power_source})
    parts.append(_table(pd.DataFrame(rows), [("hardware", "GPU"), ("basis", "pricing model"), ("rate_usd", "USD per GPU-hour (before electricity)"),
                                             ("source", "rate source"), ("power", "active power W"), ("psource", "power source")]))
    terms = [{"hardware": h, "term": k, "value": v, "source": p.term_sources.get(k, "")} for h, p in a.prices.items() for k, v in p.terms.items()]
    if terms:
        parts.append("<p>Pricing terms the model read (costmodel/data/hardware.json, or --term):</p>"
                     + _table(pd.DataFrame(terms), [("hardware", "GPU"), ("term", "term"), ("value", "value"), ("source", "source")]))
    items = [f"Month = {HOURS_PER_MONTH:g} hours ({e(SOURCES['hours_per_month'])}).",
             "GPUs per replica: 1, one model replica per GPU" + (" (precision per GPU: " + ", ".join(
                 f"{e(h)} {e(p.get('precision'))}" for h, p in res.profiles.items() if p.get("precision")) + ")" if res.profiles else "") + ".",
             "GPU power = active power x simulated utilisation (gpu_busy_frac); idle draw is not added, so energy at low utilisation is understated.",
             f"PUE {cfg.pue:g} (facility energy = GPU energy x PUE; {e(SOURCES['pue'])}).",
             "Per-token and per-request costs divide the hourly cost by what the point actually served."]
    if cfg.onprem:
        items += [f"On-premises: purchase price plus the host's share per GPU amortised straight-line over {cfg.amortisation_years:g} years of 8,760 h "
                  f"({e(SOURCES['amortisation'])}); electricity for the GPU at its utilisation plus the host's draw, times PUE.",
                  f"Electricity ${cfg.electricity_usd_per_kwh:g}/kWh ({e(SOURCES['electricity'])})."]
    else:
        items.append(f"Rental ({e(cfg.model)}): the hourly rate includes power and facility; electricity is not billed separately (energy is still reported, with PUE).")
    parts.append("<ul>" + "".join(f"<li>{x}</li>" for x in items) + "</ul>")

    parts.append("<h3>Simulation and plan settings</h3><ul>")
    st = res.settings or {}
    for k in ("duration_s", "seed", "max_replicas", "workload", "profile_id", "precision", "sweep", "points", "note"):
        if k in st and st[k] not in (None, ""):
            parts.append(f"<li>{e(k)}: {e(st[k])}</li>")
    parts.append(f"<li>SLO checked: {e(a.slo.text or 'stable (steady state) only')}; a point meets it only if the simulator judged it stable.</li>")
    if res.kind == "plan":
        parts.append("<li>Replica search: first guess = the answer at the next lower QPS scaled by the load ratio; gallop from it, then bisect; "
                     "assumes more replicas never hurt.</li>")
    pts = a.points
    for col, label in (("workload", "workload simulated"), ("router", "router")):
        if col in pts:
            vals = sorted({str(v) for v in pts[col].dropna() if str(v)})
            if vals:
                parts.append(f"<li>{label}: {e('; '.join(vals))}</li>")
    parts.append("</ul>")
    eng = [c for c in ("max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens") if c in pts]
    if eng:
        limits = pts.groupby(["hardware", "mode"], sort=False)[eng].max().reset_index()
        parts.append("<p>Simulated engine limits per replica:</p>" + _table(limits, [("hardware", "GPU"), ("mode", "mode")] + [(c, c) for c in eng]))

    return "\n".join(parts + _profile_parts(res))


def _profile_parts(res: Results) -> list[str]:
    """Each profile's provenance, part by part (pass models, commit statistics, MTP acceptance)."""
    parts = ["<h3>Which numbers are measured, projected, published or roofline</h3>",
             "<ul>" + "".join(f"<li>{_kind(k)} {e(v)}</li>" for k, v in KIND_MEANING.items()) + "</ul>"]
    for hw, prov in res.profiles.items():
        top = prov.get("provenance", {})
        parts.append(f"<h4>{e(hw)}: profile {e(prov.get('profile_id'))}</h4>")
        parts.append(f'<p>Profile: {_kind(top.get("kind"))} {e(top.get("source"))}'
                     + (f" <span class=\"muted\">({e(top.get('notes'))})</span>" if top.get("notes") else "")
                     + (f"; precision {e(prov.get('precision'))}" if prov.get("precision") else "") + "</p>")
        kinds = provenance_kinds(prov)
        if kinds:
            parts.append("<ul>" + "".join(f'<li>{_kind(k)} {e(", ".join(v))}</li>' for k, v in kinds.items()) + "</ul>")
        rows = []
        for mode, pms in prov.get("pass_models", {}).items():
            for kind, d in pms.items():
                rows.append({"part": f"{mode}/{kind} pass cost", "kind": d["kind"], "source": d.get("source"),
                             "err": "" if d.get("cv_mape_pct") is None else f"{d['cv_mape_pct']:.1f}% CV MAPE"})
        for r, d in prov.get("commit_stats", {}).items():
            rows.append({"part": f"commit statistics {r} ({d.get('description', '')})", "kind": d["kind"], "source": d.get("source"), "err": d.get("notes", "")})
        if "mtp_acceptance" in prov:
            d = prov["mtp_acceptance"]
            rows.append({"part": f"MTP acceptance (k={d.get('num_speculative_tokens')}, mean length {d.get('mean_acceptance_length', 0):.2f})",
                         "kind": d["kind"], "source": d.get("source"), "err": d.get("notes", "")})
        if rows:
            parts.append("<details><summary>every part of this profile</summary>"
                         + _table(pd.DataFrame(rows), [("part", "part"), ("kind", "provenance"), ("source", "source"), ("err", "notes / fit error")])
                         + "</details>")
    return parts


def _inputs_block(res: Results, a: Analysis) -> str:
    """The top-of-page summary of what every figure rests on (measured / prior / projected, with
    the figures, from the profiles' provenance) and the terms the page uses."""
    rows = pd.DataFrame([r.__dict__ for r in assumptions(res, a)])
    table = _table(rows, [("basis", "basis"), ("part", "input"), ("figure", "what it is"), ("hardware", "GPU"), ("source", "source")]) \
        if not rows.empty else "<p>no profile provenance in these results</p>"
    return ('<h2 id="inputs">What these numbers rest on</h2><div class="callout">'
            "<p>Measured inputs were timed by this project; priors are taken from publications or stated defaults; everything "
            "else (latency, throughput, cost) is projected by the simulator from them. Details per part: "
            '<a href="#assumptions">Assumptions and provenance</a>.</p>' + table + "</div>")


def _chart(fig, key: str, caption: str) -> str:
    """A plotly figure as a <figure> (plotly.js is inlined once in the page head)."""
    div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{key}", default_width="100%",
                      config={"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["sendDataToCloud"]})
    return f'<figure data-chart="{key}" data-title="{e(charts.TITLES[key])}">{div}<figcaption class="muted">{e(caption)}</figcaption></figure>'


def _decision_block(res: Results, a: Analysis, sensitivity=None) -> str:
    """The answer, first: the cheapest SLO-meeting fleet per load, its cost, the runner-up, what it rests on."""
    ds = decisions(res, a)
    intervals = seed_intervals(res)
    slo = a.slo.text or "stable (steady state) only: no latency bound given"
    wl = sorted({str(v) for v in a.points.get("workload", pd.Series(dtype=str)).dropna() if str(v)})
    rows = []
    for d in ds:
        if not d.meets:
            rows.append(f'<tr class="miss"><td>{d.qps:g}</td><td class="t" colspan="6">no option meets the SLO</td></tr>')
            continue
        more = f"+${d.runner_up_more_usd_per_month:,.0f} (+{d.runner_up_more_pct:.0f}%)"
        runner = f"{e(d.runner_up)}</td><td>{more}" if d.runner_up else "none meets the SLO</td><td>"
        seeds = (f'<br><span class="muted" title="{e(intervals[d.qps][1])}">{e(intervals[d.qps][0])}</span>' if d.qps in intervals else "")
        fleet = f"tie (same cost, no winner): {e(d.fleet)}" if d.tie else e(d.fleet)
        rows.append(f"<tr><td>{d.qps:g}</td><td class=\"t\"><b>{fleet}</b></td><td><b>${d.cost_usd_per_month:,.0f}</b>{seeds}</td>"
                    f"<td>${d.cost_usd_per_year:,.0f}</td><td class=\"t\">{runner}</td><td class=\"t\">{e(d.rests_on)}</td></tr>")
    what = "cheapest SLO-meeting fleet" if a.slo.text else "cheapest stable fleet (no SLO given)"
    head = (f"<tr><th>QPS</th><th class=\"t\">{what}</th><th>USD/month</th><th>USD/year</th>"
            "<th class=\"t\">runner-up</th><th>runner-up costs more by (per month)</th><th class=\"t\">winner rests on</th></tr>")
    first = next((d for d in ds if d.meets), None)
    lead = e(first.text) if first else "No option meets the SLO at any evaluated load."
    if a.crossover.status != "not-compared":
        lead += f'</p><p class="lead" id="crossover-answer">{e(a.crossover.text)}'
    upfront = [d for d in ds if d.meets and d.upfront_usd > 0]
    extra = (f"<p>Upfront payment ({e(a.pricing.model)}): " + ", ".join(f"{d.qps:g} QPS ${d.upfront_usd:,.0f}" for d in upfront)
             + " (already spread over the monthly figures).</p>") if upfront else ""
    verdict = (f'<p class="verdict">Sensitivity (plan --sensitivity, at the plan\'s pricing): {e(sensitivity.verdict)}.</p>'
               if sensitivity is not None else '<p class="muted">Sensitivity not computed: run <code>costmodel plan --sensitivity</code> for it.</p>')
    return (f'<section id="decision" class="answer"><h2>The answer</h2><p class="lead">{lead}</p>{verdict}'
            f"<table class=\"decision\"><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>{extra}"
            f'<p class="muted">SLO: {e(slo)}. Pricing: {e(a.pricing.model)} (month = {HOURS_PER_MONTH:g} h, year = 8,760 h). '
            f"Workload: {e('; '.join(wl) or 'as simulated')}. Measured inputs were timed by this project, projected ones carried over "
            'from another GPU or precision, priors taken from publications, calibrated ones fitted to a published engine figure (<a href="#assumptions">details</a>).</p></section>')


def _figures(res: Results, a: Analysis, sensitivity=None) -> list[str]:
    hardware = list(a.prices)
    is_plan = res.kind == "plan"
    best = a.best_frame()
    # a plan charts each cell's chosen (fewest SLO-meeting) fleet; simulate results chart every point, misses marked
    chart_df = (best if not best.empty else a.points.iloc[0:0]) if is_plan else a.points
    per_replicas = not is_plan
    basis = a.pricing.model
    slo_limits = {b.column: b.limit_ms for b in a.slo.bounds}
    what = "the fewest SLO-meeting replicas of each (GPU, mode)" if is_plan else "every simulated configuration (GPU / mode x replicas)"
    miss = "; an open grey x marks a point that is unstable or misses the SLO (hover says why)"
    # one chart per question; a plan's fleets all serve the offered load, so its throughput lines would only overlap
    figs = [
        _chart(charts.cost_chart(chart_df, hardware, per_replicas, basis), "cost",
               f"What does each option cost per month? {what}; whole GPUs, so steps{miss}."),
        _chart(charts.cost_per_mtok_chart(chart_df, hardware, per_replicas, basis), "cost_per_mtok",
               f"What does a token cost? USD per 1M output tokens served, {what}{miss}."),
        _chart(charts.latency_chart(chart_df, hardware, per_replicas, slo_limits), "latency",
               f"How far from the SLO? p95 latency of {what}; dashed: the SLO{miss}."),
    ]
    if not is_plan:
        figs.append(_chart(charts.throughput_chart(chart_df, hardware, per_replicas), "throughput",
                           f"How much does each configuration serve? Output tokens per second, all replicas{miss}."))
    if a.crossover.status != "not-compared" and not best.empty:
        by_mode = (best.sort_values("cost_usd_per_month").groupby(["mode", "qps"], as_index=False).head(1)
                   .assign(_m=lambda d: d["mode"].map(mode_order)).sort_values(["_m", "qps"]).drop(columns="_m"))
        per_gpu = [c for c in a.crossover_by_hardware.values() if c.status != "not-compared"] if len(a.crossover_by_hardware) > 1 else []
        figs.append("<h3>Crossover</h3>" + '<div class="callout">' + f"<p><b>{e(a.crossover.text)}</b></p>"
                    + "".join(f"<p>{e(c.text)}</p>" for c in per_gpu)
                    + f'<p class="muted">How: {e(a.crossover.method)}.</p></div>'
                    + _chart(charts.crossover_chart(a.crossover, by_mode), "crossover", "Monthly cost of the cheapest SLO-meeting option of each mode (any GPU)."))
    if sensitivity is not None and not sensitivity.table.empty:
        figs.append(_chart(charts.tornado_chart(sensitivity.table, sensitivity.base_usd_per_month), "tornado",
                           "Each input moved to the low and the high end of its range, the others as planned; hover names the winner there."))
    return figs


def render(res: Results, a: Analysis, title: str = "Serving cost: DiffusionGemma-26B-A4B vs Gemma-4-26B-A4B (AR, MTP)") -> str:
    """The whole report as one HTML string: the answer, the charts, what it rests on, the details."""
    sensitivity = sensitivity_view(res)
    is_plan = res.kind == "plan"
    cells = a.cells if not a.cells.empty else a.points
    plan_cols = [("hardware", "GPU"), ("mode", "mode"), ("qps", "QPS"), ("replicas", "replicas"), ("gpus", "GPUs"), ("meets_slo", "meets SLO"),
                 ("cost_usd_per_month", "USD/month"), ("cost_usd_per_year", "USD/year"), ("cost_usd_per_mtok_output", "USD/1M out tok"),
                 ("breakeven_usd_per_mtok_input", "break-even USD/1M in tok"), ("breakeven_usd_per_mtok_output", "break-even USD/1M out tok"),
                 ("cost_usd_per_1k_requests", "USD/1k req"), ("energy_kwh_per_mtok_output", "kWh/1M out tok"), ("ttft_ms_p95", "p95 TTFT ms"),
                 ("e2e_ms_p95", "p95 E2E ms"), ("output_tokens_per_s", "out tok/s"), ("gpu_busy_frac", "GPU busy"), ("slo_failures", "why not")]
    plan_cols = [c for c in plan_cols if c[0] in cells.columns]
    dict_df = dictionary(list(a.cells.columns) if is_plan else list(a.points.columns))
    terms = "".join(f"<dt><b>{e(k)}</b></dt><dd>{e(v)}</dd>" for k, v in TERMS.items())
    # a load whose cheapest options tie (several rows cheapest_at_qps): those rows are marked as a tie, none as the winner
    tied = set(cells.groupby("qps")["cheapest_at_qps"].sum().loc[lambda n: n > 1].index) if "cheapest_at_qps" in cells else set()
    body = [
        f"<h1>{e(title)}</h1>",
        f"<p class=\"muted\">costmodel {e(__version__)} - generated {e(now_iso())} from {e(res.kind)} results {e(res.path)}</p>",
        _decision_block(res, a, sensitivity),
        "<h2>Charts</h2>", *_figures(res, a, sensitivity),
        _inputs_block(res, a),
        _assumptions(res, a),
        "<h2>Details</h2>",
        "<h3>" + ("Plan: fewest replicas meeting the SLO, every (GPU, mode, QPS)" if is_plan
                  else "Cheapest SLO-meeting simulated configuration per (GPU, mode, QPS)" if a.slo.text
                  else "Cheapest stable simulated configuration per (GPU, mode, QPS) (no SLO given: stability only)") + "</h3>",
        _table(cells, plan_cols, lambda r: (("tie" if r.get("qps") in tied else "win") if r.get("cheapest_at_qps")
                                            else ("miss" if not r.get("meets_slo") else ""))),
        f'<details><summary>Terms</summary><dl class="terms">{terms}</dl></details>',
        "<details><summary>Column dictionary: meaning, unit and source of every CSV column</summary>",
        _table(dict_df, [("column", "column"), ("meaning", "meaning"), ("unit", "unit"), ("source", "source")]),
        "</details>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{e(title)}</title><style>{CSS}</style><script>{plotly_js()}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js as shipped inside the plotly package (no network at build or view time)."""
    return get_plotlyjs()
