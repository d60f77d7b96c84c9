"""`costmodel plan --prefix-caching on,off`: the same plan with vLLM's prefix caching on and off,
side by side per (GPU, mode, QPS): the fleet each needs to meet the SLO, its monthly cost, and the
TTFT and hit rate at that fleet. Each plan is written whole to its own output set
(OUT/prefix-caching-on, OUT/prefix-caching-off); this module reads their analyses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from costmodel.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

CHOICES = {"on": True, "off": False}
COLUMNS = ("hardware", "mode", "qps", "replicas_on", "replicas_off", "cost_usd_per_month_on", "cost_usd_per_month_off",
           "ttft_ms_p50_on", "ttft_ms_p50_off", "ttft_ms_p95_on", "ttft_ms_p95_off", "prefix_hit_rate_tokens_on")


def parse_choice(text: str | None) -> list[bool] | None:
    """'on', 'off', 'on,off' -> [True], [False], [True, False]; None: vLLM's default."""
    if text is None:
        return None
    vals = [v.strip().lower() for v in text.split(",") if v.strip()]
    if not vals or any(v not in CHOICES for v in vals) or len(set(vals)) != len(vals):
        raise UserError(f"--prefix-caching {text!r} is not on, off or on,off", "e.g. --prefix-caching on,off to compare both")
    return [CHOICES[v] for v in vals]


def compare(cells_on: pd.DataFrame, cells_off: pd.DataFrame) -> pd.DataFrame:
    """The two plans' cells (Analysis.cells: the cheapest SLO-meeting point per cell) side by side."""
    keep = ["hardware", "mode", "qps", "replicas", "cost_usd_per_month", "ttft_ms_p50", "ttft_ms_p95", "prefix_hit_rate_tokens"]

    def part(df: pd.DataFrame, tag: str) -> pd.DataFrame:
        cols = [c for c in keep if c in df.columns]
        return df[cols].rename(columns={c: f"{c}_{tag}" for c in cols[3:]})

    both = part(cells_on, "on").merge(part(cells_off, "off"), on=["hardware", "mode", "qps"], how="outer")
    return both[[c for c in COLUMNS if c in both.columns]]
