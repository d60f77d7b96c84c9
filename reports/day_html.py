"""The day's self-contained HTML page (`costmodel report DAYDIR -o day.html`), answer first: the
cheapest fleet meeting the SLO every hour, its month and year, the runner-up and what the winner
rests on (a projected GPU profile called out); then the fleet hour by hour (chart), the month's
bills (fleets missing the SLO last, marked), the pricing models, the price sensitivity, and what
the figures rest on per GPU."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from costmodel import __version__
from costmodel.schemas.day import DayRecord
from costmodel.timestamps import now_iso
from costmodel.costing.day_answer import answer, day_basis
from reports.day import cheapest, fleet_key, price_sensitivity, pricing, pricing_models_table, span_note
from reports.html import CSS, e, plotly_js


def _money(x) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"${x:,.0f}"


def _answer_block(day: DayRecord) -> str:
    a = answer(day)
    warn = (f'<p class="callout"><b>The answer rests on a projection.</b> {e(a.rests_on)}. Measure that GPU '
            "(<code>costmodel measure</code> + <code>fit</code>) before committing to it.</p>") if a.projected else ""
    return (f'<section id="decision" class="answer"><h2>The answer</h2><p class="lead">{e(a.text)}</p>{warn}'
            f'<p class="muted">Load: {e(day.load)}. SLO: {e(day.slo)}, every hour. Pricing: {e(pricing(day).model)}; '
            f"a month is the day repeated for 365.25/12 days.{e(span_note(day))}</p></section>")


def _hours_chart(day: DayRecord) -> str:
    h = day.hours
    if h.empty or "replicas_mean" not in h:
        return ""
    fig = go.Figure()
    for (hw, mode, pol), g in h.groupby(["hardware", "mode", "policy"], sort=False):
        g = g.sort_values("hour")
        fig.add_trace(go.Scatter(x=g["hour"], y=g["replicas_mean"], mode="lines+markers", name=f"{hw} / {mode} / {pol}",
                                 line={"shape": "hv", "dash": "dot" if pol == "static" else "solid"},
                                 customdata=g[["offered_qps", "slo_attainment"]].to_numpy(),
                                 hovertemplate="hour %{x}: %{y:.2f} replicas, %{customdata[0]:.1f} QPS, SLO attainment %{customdata[1]:.1%}<extra></extra>"))
    fig.update_layout(title="The fleet hour by hour (mean replicas billed)", xaxis_title="hour of day", yaxis_title="replicas",
                      height=420, margin={"l": 60, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.2})
    fig.update_yaxes(rangemode="tozero", tickformat=",d")
    div = fig.to_html(full_html=False, include_plotlyjs=False, div_id="chart-day-hours", default_width="100%", config={"displaylogo": False})
    return f'<figure data-chart="day-hours">{div}<figcaption class="muted">Dotted: static for the peak; solid: autoscaled.</figcaption></figure>'


def _table(df: pd.DataFrame, row_class=None) -> str:
    head = "".join(f'<th class="{"t" if df[c].dtype == object else ""}">{e(c)}</th>' for c in df.columns)
    body = []
    for r in df.to_dict("records"):
        cls = row_class(r) if row_class else ""
        cells = "".join(f'<td class="t">{e(v)}</td>' if isinstance(v, str) else f"<td>{_money(v) if 'usd' in c.lower() else e(v)}</td>"
                        for c, v in r.items())
        body.append(f'<tr class="{cls}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _bills_block(day: DayRecord) -> str:
    best = {fleet_key(b) for b in cheapest(day.bills)}
    tie = len(best) > 1
    rows = []
    for b in day.bills:
        k = fleet_key(b)
        rows.append({"fleet": k, "answer": ("tie (no winner)" if tie else "cheapest") if k in best else "",
                     "replicas": f"{b.replicas_min}-{b.replicas_max}", "meets the SLO every hour":
                     ("yes" if b.meets_slo_every_hour else f"NO: {b.hours_meeting_slo}/{b.hours} hours" if not b.note else b.note),
                     "SLO verdict": b.slo_verdict + (f": {b.borderline}" if b.borderline else ""),
                     "SLO attainment": f"{100 * b.slo_attainment:.2f}%" if b.slo_attainment == b.slo_attainment else "",
                     "requests per day": f"{b.requests_per_day:,}", "GPU-h per day": f"{b.gpu_hours_per_day:,.1f}",
                     "USD/month": b.cost_usd_per_month if b.meets_slo_every_hour else math.nan,
                     "USD/month, 95% interval": (f"{_money(b.cost_low)}-{_money(b.cost_usd_per_month)}" if b.meets_slo_every_hour and b.cost_low < b.cost_usd_per_month
                                                 else "")})
    df = pd.DataFrame(rows)
    return ("<h2>The month's bills</h2><p class=\"muted\">Fleets meeting the SLO every hour first, cheapest first; those missing it "
            "follow, greyed, without a price (their cost buys a service that misses the SLO). Fleets of other GPUs or modes within 1% of "
            "the cheapest's monthly cost, or whose 95% cost interval overlaps its interval, tie with it: all are marked, none wins. An interval "
            "runs from the day of the fewest peak replicas not settled to miss the SLO (borderline) to the settled one's; an hour is borderline "
            "where a bound's 95% batch-means interval over its requests straddles the bound.</p>"
            + _table(df, lambda r: ("tie" if tie else "win") if r["fleet"] in best else ("miss" if not r["meets the SLO every hour"] == "yes" else "")))


def _pricing_block(day: DayRecord) -> str:
    table, winners = pricing_models_table(day)
    lines = "".join(f"<li>{e(m)}: {e(w or 'not priced (a GPU has no price under it)')}</li>" for m, w in winners.items())  # a tie named whole
    sens = price_sensitivity(day)
    sens = sens.rename(columns=lambda c: c.replace("_", " ").replace("usd per month", "USD/month"))
    sens_html = _table(sens) if not sens.empty else "<p class=\"muted\">No GPU of this day quotes a price range.</p>"
    return ("<h2>Pricing models</h2><p class=\"muted\">The same fleets billed under each model: hourly rentals pay the GPU-hours held; "
            "commitments and purchases the fleet's most GPUs all day (plus electricity when owned).</p>" + _table(table)
            + f"<p>Cheapest per model:</p><ul>{lines}</ul>"
            + "<h2>Price sensitivity</h2><p class=\"muted\">Each GPU's price at the ends of the range its catalog source quotes, the others "
              "as priced: does the winner change?</p>" + sens_html)


def _basis_block(day: DayRecord) -> str:
    items = []
    for h, prov in day.doc.get("profiles", {}).items():
        modes = sorted({b.mode for b in day.bills if b.hardware == h})
        src = (prov.get("provenance") or {})
        lines = "".join(f"<li>{e(m)}: {e(day_basis(prov, m))}</li>" for m in modes)
        items.append(f"<li><b>{e(h)}</b> ({e(prov.get('precision'))}), profile {e(prov.get('profile_id'))}: "
                     f"{e(src.get('kind'))}, {e(src.get('source'))}<ul>{lines}</ul></li>")
    s = day.doc.get("settings", {})
    return (f'<h2 id="assumptions">What the figures rest on</h2><ul>{"".join(items)}</ul>'
            f"<p class=\"muted\">Workload: {e(s.get('workload') or 'the simulator default')}; engine settings: {e(s.get('engine') or 'defaults')}; "
            f"seed {e(s.get('seed'))}; time compression {e(day.doc.get('compress'))}x; start-up and scaling: {e(day.doc.get('scaling'))}.</p>")


def render_day(day: DayRecord) -> str:
    title = f"A day of serving: {day.load}"
    body = [f"<h1>{e(title)}</h1>", f"<p class=\"muted\">costmodel {e(__version__)} - generated {e(now_iso())} from {e(day.path)}</p>",
            _answer_block(day), _hours_chart(day), _bills_block(day), _pricing_block(day), _basis_block(day)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{CSS}</style><script>{plotly_js()}</script></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
