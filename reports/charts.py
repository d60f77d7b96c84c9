"""Interactive charts (plotly figures; html.py embeds them with plotly.js inlined once, so the page
works offline). Every chart: hover values with units, a legend whose entries toggle their series,
one colour per GPU and one dash and marker per mode (from the mode registry), and the same open
grey "x" on every point that is unstable or misses the SLO, in every chart. Whole-GPU costs are
drawn as steps: a fleet sized for a QPS serves every load up to it."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from costmodel.modes import get_mode, mode_order
from costmodel.costing import Crossover

TITLES = {
    "cost": "Monthly cost of the SLO-meeting fleet vs QPS",
    "cost_per_mtok": "Cost per 1M output tokens vs QPS",
    "latency": "p95 latency vs QPS",
    "throughput": "Throughput vs QPS",
    "crossover": "Crossover: cheapest SLO-meeting monthly cost per mode vs QPS",
    "tornado": "Sensitivity: monthly cost of the decision at the low and high end of each input",
}
HW_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
DASH = {"-": "solid", "--": "dash", ":": "dot", "-.": "dashdot"}
SYMBOL = {"o": "circle", "s": "square", "^": "triangle-up", "v": "triangle-down", "D": "diamond", "d": "diamond", "x": "x", "*": "star"}
MISS_SYMBOL, MISS_COLOR = "x-open", "#7f7f7f"  # unstable or missing the SLO, the same in every chart
QPS_AXIS = "offered load (QPS, requests/s)"


def _layout(fig: go.Figure, key: str, ytitle: str, log: bool = False, money: bool = False, height: int = 420) -> go.Figure:
    fig.update_layout(title={"text": TITLES[key], "x": 0.01}, height=height, margin={"l": 70, "r": 20, "t": 50, "b": 50},
                      legend={"title": {"text": "click to toggle"}, "itemclick": "toggle", "itemdoubleclick": "toggleothers"},
                      hovermode="closest", template="plotly_white", meta={"chart": key})
    fig.update_xaxes(title_text=QPS_AXIS, rangemode="tozero")
    fig.update_yaxes(title_text=ytitle, type="log" if log else "linear", tickprefix="$" if money else "", separatethousands=True,
                     rangemode="normal" if log else "tozero")
    return fig


def log_ticks(values) -> tuple[list[float], list[str]]:
    """Ticks for a log axis at 1, 2, 5 x 10^k covering `values`, each labelled in full ("500",
    "1,000", "2,000"): plotly's own minor labels read "1,000 / 5 / 2" where 5 means 500."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if not vals:
        return [], []
    lo, hi = min(vals), max(vals)
    ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    below = [t for t in ticks if t <= lo]
    above = [t for t in ticks if t >= hi]
    ticks = [t for t in ticks if (below[-1] if below else lo) <= t <= (above[0] if above else hi)]
    if len(ticks) > 9:  # a wide range: decades only
        ticks = [t for t in ticks if f"{t:g}".lstrip("0.").startswith("1")]
    return ticks, [f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks]


def _style(hardware_list, hw: str, mode: str) -> tuple[str, str, str]:
    color = HW_COLORS[hardware_list.index(hw) % len(HW_COLORS)] if hw in hardware_list else "#444444"
    ls, marker = get_mode(mode).line_style
    return color, DASH.get(ls, "solid"), SYMBOL.get(marker, "circle")


def _series(df: pd.DataFrame, per_replicas: bool):
    by = ["hardware", "mode", "replicas"] if per_replicas else ["hardware", "mode"]
    d = df.assign(_m=df["mode"].map(mode_order)).sort_values(["hardware", "_m", "qps"], kind="mergesort")
    for key, g in d.groupby(by, sort=False):
        yield key, g.drop(columns="_m")


def _ok(g: pd.DataFrame) -> list[bool]:
    if "meets_slo" in g:
        return [bool(x) for x in g["meets_slo"]]
    return [bool(x) for x in g.get("stable", pd.Series(True, index=g.index))]


def _custom(g: pd.DataFrame, ok: list[bool]) -> list[list]:
    """Per point: replicas, GPUs, verdict text (hover)."""
    why = g["slo_failures"] if "slo_failures" in g else pd.Series("", index=g.index)
    return [[int(r) if pd.notna(r) else "", int(gp) if pd.notna(gp) else "",
             "meets the SLO" if o else f"MISSES: {str(w)[:90] or 'unstable'}"]
            for r, gp, o, w in zip(g["replicas"], g.get("gpus", g["replicas"]), ok, why)]


def _trace(fig, g, y: str, name: str, style, hover_y: str, shape: str = "linear", row=None, col=None, legend=True):
    """One series: the line through its points, each point marked (open grey x where it misses)."""
    color, dash, symbol = style
    ok = _ok(g)
    tr = go.Scatter(x=g["qps"], y=g[y], name=name, legendgroup=name, showlegend=legend, mode="lines+markers", line={"color": color, "dash": dash, "shape": shape},
                    marker={"symbol": [symbol if o else MISS_SYMBOL for o in ok], "size": [8 if o else 11 for o in ok],
                            "color": [color if o else MISS_COLOR for o in ok], "line": {"width": 1.5, "color": color}},
                    customdata=_custom(g, ok),
                    hovertemplate=f"<b>{name}</b><br>QPS %{{x}} req/s<br>{hover_y}<br>%{{customdata[0]}} replicas, %{{customdata[1]}} GPUs"
                                  "<br>%{customdata[2]}<extra></extra>")
    if row is None:
        fig.add_trace(tr)
    else:
        fig.add_trace(tr, row=row, col=col)


def _name(hw, mode, replicas=None) -> str:
    return f"{hw} / {mode}" + (f" x{int(replicas)}" if replicas is not None else "")


def _points(df: pd.DataFrame, y: str) -> pd.DataFrame:
    return df[df[y].notna()] if y in df else df.iloc[0:0]


def cost_chart(df: pd.DataFrame, hardware_list, per_replicas: bool, basis: str) -> go.Figure:
    fig = go.Figure()
    for key, g in _series(_points(df, "cost_usd_per_month"), per_replicas):
        _trace(fig, g, "cost_usd_per_month", _name(key[0], key[1], key[2] if per_replicas else None), _style(hardware_list, key[0], key[1]),
               "$%{y:,.0f} per month", shape="linear" if per_replicas else "vh")
    return _layout(fig, "cost", f"USD per month ({basis})", money=True)


def cost_per_mtok_chart(df: pd.DataFrame, hardware_list, per_replicas: bool, basis: str) -> go.Figure:
    fig = go.Figure()
    for key, g in _series(_points(df, "cost_usd_per_mtok_output"), per_replicas):
        _trace(fig, g, "cost_usd_per_mtok_output", _name(key[0], key[1], key[2] if per_replicas else None), _style(hardware_list, key[0], key[1]),
               "$%{y:,.3f} per 1M output tokens")
    return _layout(fig, "cost_per_mtok", f"USD per 1M output tokens ({basis})", money=True)


def latency_chart(df: pd.DataFrame, hardware_list, per_replicas: bool, slo_limits: dict) -> go.Figure:
    """p95 TTFT and p95 end-to-end latency (log axes), SLO limits dashed; one legend for both panels."""
    panels = (("ttft_ms_p95", "p95 time to first token (ms)"), ("e2e_ms_p95", "p95 end-to-end latency (ms)"))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=[p[1] for p in panels])
    for col, (y, label) in enumerate(panels, start=1):
        for key, g in _series(_points(df, y), per_replicas):
            _trace(fig, g, y, _name(key[0], key[1], key[2] if per_replicas else None), _style(hardware_list, key[0], key[1]),
                   f"{label.split(' (')[0]} %{{y:,.0f}} ms", row=1, col=col, legend=col == 1)
        if y in slo_limits:
            fig.add_hline(y=slo_limits[y], line_dash="dash", line_color="black", row=1, col=col,
                          annotation_text=f"SLO {y} <= {slo_limits[y]:g} ms", annotation_position="top left")
    _layout(fig, "latency", "ms", log=True, height=440)
    for col, (y, _) in enumerate(panels, start=1):
        vals, text = log_ticks(list(_points(df, y).get(y, [])) + ([slo_limits[y]] if y in slo_limits else []))
        fig.update_yaxes(title_text="ms", tickvals=vals or None, ticktext=text or None, row=1, col=col)
    return fig


def throughput_chart(df: pd.DataFrame, hardware_list, per_replicas: bool) -> go.Figure:
    fig = go.Figure()
    for key, g in _series(_points(df, "output_tokens_per_s"), per_replicas):
        _trace(fig, g, "output_tokens_per_s", _name(key[0], key[1], key[2] if per_replicas else None), _style(hardware_list, key[0], key[1]),
               "%{y:,.0f} output tokens/s")
    return _layout(fig, "throughput", "output tokens / s served (all replicas)")


def crossover_chart(cross: Crossover, best_by_mode: pd.DataFrame) -> go.Figure:
    """Monthly cost of each mode's cheapest SLO-meeting option (any GPU) vs QPS, steps, the bracket shaded."""
    fig = go.Figure()
    for mode, g in best_by_mode.groupby("mode", sort=False):
        g = g.sort_values("qps")
        ls, marker = get_mode(mode).line_style
        fig.add_trace(go.Scatter(x=g["qps"], y=g["cost_usd_per_month"], name=f"{mode} (cheapest GPU)", mode="lines+markers",
                                 line={"dash": DASH.get(ls, "solid"), "shape": "vh"}, marker={"symbol": SYMBOL.get(marker, "circle"), "size": 8},
                                 customdata=list(zip(g["hardware"], g["replicas"].astype(int))),
                                 hovertemplate=f"<b>{mode}</b> on %{{customdata[0]}} x%{{customdata[1]}}<br>QPS %{{x}} req/s<br>"
                                               "$%{y:,.0f} per month<extra></extra>"))
    if cross.status == "bracketed":
        fig.add_vrect(x0=cross.qps_low, x1=cross.qps_high, fillcolor="#f2c14e", opacity=0.25, line_width=0,
                      annotation_text="crossover bracket", annotation_position="top left")
        if cross.qps_estimate is not None and math.isfinite(cross.qps_estimate):
            fig.add_vline(x=cross.qps_estimate, line_dash="dash", line_color="#b8860b", annotation_text=f"~{cross.qps_estimate:.3g} QPS")
    return _layout(fig, "crossover", "USD per month", money=True)


def tornado_chart(rows: pd.DataFrame, base_usd: float) -> go.Figure:
    """One bar per input: the decision's monthly cost at its low and high end; where the winner changes, the bar says so."""
    fig = go.Figure()
    d = rows.assign(_span=(rows["high_usd_per_month"] - rows["low_usd_per_month"]).abs()).sort_values("_span")
    for end, color in (("low", "#4c78a8"), ("high", "#e45756")):
        fig.add_trace(go.Bar(y=d["input"], x=d[f"{end}_usd_per_month"] - base_usd, base=base_usd, orientation="h", name=f"input at its {end} end",
                             marker_color=color, customdata=list(zip(d[f"{end}_value"], d[f"{end}_winner"])),
                             hovertemplate="<b>%{y}</b> = %{customdata[0]}<br>decision's cost $%{x:,.0f} per month<br>winner: %{customdata[1]}"
                                           "<extra></extra>"))
    fig.add_vline(x=base_usd, line_color="black", annotation_text=f"as planned ${base_usd:,.0f}/month")
    fig.update_layout(barmode="overlay")
    _layout(fig, "tornado", "input", money=False, height=120 + 45 * max(len(d), 1))
    fig.update_xaxes(title_text="USD per month (cheapest SLO-meeting fleet, summed over the planned loads)", tickprefix="$", rangemode="normal")
    fig.update_yaxes(type="category", tickprefix="", title_text="")
    return fig
