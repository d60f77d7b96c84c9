"""Charts as inline SVG (matplotlib's SVG backend, text kept as text, metadata stripped, element
ids made unique per chart) so an HTML report embeds them with no external file or font.

Every chart's <svg> carries a <title> (the checked chart name) and data-chart attribute."""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib import ticker  # noqa: E402

from costmodel.modes import get_mode  # noqa: E402
from simulate.plan.costing import Crossover  # noqa: E402

TITLES = {
    "latency": "Latency vs QPS",
    "throughput": "Throughput vs QPS",
    "cost": "Cost per 1M output tokens vs QPS",
    "crossover": "Crossover: cheapest SLO-meeting monthly cost vs QPS",
}
HW_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _svg(fig, key: str) -> str:
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"costmodel-{key}", "font.family": "sans-serif"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>\s*", "", s, flags=re.S)
    # unique ids per chart: prefix every id and every reference to it
    ids = set(re.findall(r'\bid="([^"]+)"', s))
    for i in sorted(ids, key=len, reverse=True):
        s = re.sub(rf'(\bid=")({re.escape(i)})(")', rf"\1{key}-\2\3", s)
        s = re.sub(rf'(#)({re.escape(i)})([)"])', rf"\1{key}-\2\3", s)
    title = TITLES[key]
    return re.sub(r"<svg\b", f'<svg data-chart="{key}" role="img" aria-label="{title}"', s, count=1).replace(">", f"><title>{title}</title>", 1)


def _series(df: pd.DataFrame, by):
    for key, g in df.groupby(by, sort=False):
        yield key, g.sort_values("qps")


def _style(hardware_list, hw, mode):
    color = HW_COLORS[hardware_list.index(hw) % len(HW_COLORS)] if hw in hardware_list else "#444444"
    ls, marker = get_mode(mode).line_style
    return dict(color=color, linestyle=ls, marker=marker, markersize=4, linewidth=1.4)


def _label(hw, mode, replicas=None):
    return f"{hw} / {mode}" + (f" x{int(replicas)}" if replicas is not None else "")


def _lines(ax, df: pd.DataFrame, y: str, hardware_list, per_replicas: bool):
    by = ["hardware", "mode", "replicas"] if per_replicas else ["hardware", "mode"]
    d = df[df[y].notna()] if y in df else df.iloc[0:0]
    for key, g in _series(d, by):
        hw, mode = key[0], key[1]
        ax.plot(g["qps"], g[y], label=_label(hw, mode, key[2] if per_replicas else None), **_style(hardware_list, hw, mode))


def _plain(v, _pos=None) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"


def _finish(ax, ylabel: str, log: bool = False, money: bool = False):
    """Axis labels, grid, plain-number ticks (log axes at 1-2-5 steps); money as $ amounts."""
    ax.set_xlabel("offered load (QPS, requests/s)")
    ax.set_ylabel(ylabel)
    fmt = ticker.FuncFormatter((lambda v, p=None: "$" + _plain(v)) if money else _plain)
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    else:
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(fmt)
    ax.grid(True, which="major", alpha=0.3)


def _legend(fig, axes):
    handles, labels = [], []
    for ax in axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(labels)), fontsize=8, frameon=False)


def latency_chart(df: pd.DataFrame, hardware_list, per_replicas: bool, slo_limits: dict) -> str:
    """p95 TTFT and p95 end-to-end latency vs QPS; SLO limits as dashed lines."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (col, name) in zip(axes, (("ttft_ms_p95", "p95 time to first token (ms)"), ("e2e_ms_p95", "p95 end-to-end latency (ms)"))):
        _lines(ax, df, col, hardware_list, per_replicas)
        if col in slo_limits:
            ax.axhline(slo_limits[col], color="black", linestyle="--", linewidth=1, label=f"SLO {col} <= {slo_limits[col]:g}")
        _finish(ax, name, log=True)
    fig.suptitle(TITLES["latency"] + (" (each configuration)" if per_replicas else " (fewest replicas meeting the SLO)"))
    _legend(fig, axes)
    return _svg(fig, "latency")


def throughput_chart(df: pd.DataFrame, hardware_list, per_replicas: bool) -> str:
    fig, ax = plt.subplots(figsize=(10, 4))
    _lines(ax, df, "output_tokens_per_s", hardware_list, per_replicas)
    if not per_replicas:
        ax.text(0.01, 0.97, "at the fewest SLO-meeting replicas every option serves the offered load, so the lines overlap",
                transform=ax.transAxes, fontsize=7, va="top", color="#555555")
    _finish(ax, "output tokens / s served (all replicas)")
    ax.set_title(TITLES["throughput"])
    _legend(fig, [ax])
    return _svg(fig, "throughput")


def cost_chart(df: pd.DataFrame, hardware_list, per_replicas: bool, basis: str) -> str:
    fig, ax = plt.subplots(figsize=(10, 4))
    _lines(ax, df, "cost_usd_per_mtok_output", hardware_list, per_replicas)
    _finish(ax, f"USD per 1M output tokens ({basis})", money=True)
    ax.set_title(TITLES["cost"])
    _legend(fig, [ax])
    return _svg(fig, "cost")


def crossover_chart(cross: Crossover, best_by_mode: pd.DataFrame) -> str:
    """Monthly cost of the cheapest SLO-meeting option per mode (any GPU) vs QPS, with the
    crossover bracket shaded and its estimate marked."""
    fig, ax = plt.subplots(figsize=(10, 4))
    for mode, g in best_by_mode.groupby("mode", sort=False):
        g = g.sort_values("qps")
        ls, marker = get_mode(mode).line_style
        ax.plot(g["qps"], g["cost_usd_per_month"], linestyle=ls, marker=marker, linewidth=1.6, label=f"{mode} (cheapest GPU)")
        for r in g.to_dict("records"):
            ax.annotate(r["hardware"], (r["qps"], r["cost_usd_per_month"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if cross.status == "bracketed":
        ax.axvspan(cross.qps_low, cross.qps_high, color="#f2c14e", alpha=0.25, label="crossover bracket")
        if cross.qps_estimate is not None:
            ax.axvline(cross.qps_estimate, color="#b8860b", linestyle="--", label=f"crossover ~{cross.qps_estimate:.3g} QPS")
    _finish(ax, "USD per month", money=True)
    ax.set_title(TITLES["crossover"])
    _legend(fig, [ax])
    return _svg(fig, "crossover")

