"""`costmodel plan --seeds N` and `--sensitivity`: the options and the tables they print (the work is
simulate.plan.sensitivity's)."""

from __future__ import annotations

import math
from dataclasses import replace

import click

from costmodel.cli.checked import checked
from costmodel.fields import MAX_SEEDS, SEEDS


def extras_options(f):
    f = click.option("--sensitivity", is_flag=True,
                     help="Re-plan with each input at the low and the high end of its range (GPU prices, MTP acceptance, steps per canvas, "
                          "prompt and output length, pass-cost error, DiffusionGemma's prefill price), each end bisecting its own crossover: sensitivity.csv, the report's "
                          "tornado chart and verdict.")(f)
    f = click.option("--max-seeds", type=int, default=None, callback=checked(MAX_SEEDS),
                     help=f"Allow --seeds above {SEEDS.hi:g} (each seed re-plans every GPU, mode and QPS).")(f)
    return click.option("--seeds", type=int, default=1, show_default=True,
                        help="Re-plan under this many seeds (--seed, --seed+1, ...): replica-count spread and a 95% interval of the "
                             "winner's monthly cost (replicates.csv, replicates_decision.csv).")(f)


def check_seeds(seeds: int, max_seeds: int | None = None) -> None:
    """--seeds within its bound, or within --max-seeds when given (the run size, before any search)."""
    bound = SEEDS if max_seeds is None else replace(SEEDS, hi=max_seeds, override="")
    bound.check(seeds)


def _usd(x) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:,.0f}"


def print_extras(con, extras: dict) -> None:
    """The tables of --seeds and --sensitivity (their libraries imported here, where they print: `plan` declares these options
    long before, and forks its workers before loading pandas)."""
    if not extras:
        return
    import pandas as pd
    from rich.table import Table

    from simulate.plan.sensitivity import crossover_qps_text

    if "replicates" in extras:
        cells = extras["replicates"][0]
        seeds = [c for c in cells.columns if c.startswith("replicas_seed_")]
        t = Table(title=f"Replica count over {len(seeds)} seeds (fewest meeting the SLO)")
        for c in ("hardware", "mode", "qps", "per seed", "min", "median", "max"):
            t.add_column(c, justify="left" if c in ("hardware", "mode", "per seed") else "right")
        for r in cells.to_dict("records"):
            vals = ["-" if pd.isna(r[s]) else str(int(r[s])) for s in seeds]
            spread = "" if r["replicas_min"] == r["replicas_max"] else "bold yellow"
            t.add_row(str(r["hardware"]), str(r["mode"]), f"{r['qps']:g}", " ".join(vals), _usd(r["replicas_min"]), f"{r['replicas_median']:g}",
                      _usd(r["replicas_max"]), style=spread)
        con.print(t)
        d = Table(title="Cheapest SLO-meeting fleet's monthly cost over the seeds")
        for c in ("qps", "winners (seeds)", "USD/month mean", "95% interval", "min", "max"):
            d.add_column(c, justify="left" if c.startswith("winners") else "right")
        for r in extras["replicates_decision"][0].to_dict("records"):
            d.add_row(f"{r['qps']:g}", r["winners"], _usd(r["cost_usd_per_month_mean"]),
                      f"{_usd(r['cost_usd_per_month_ci95_low'])} - {_usd(r['cost_usd_per_month_ci95_high'])}",
                      _usd(r["cost_usd_per_month_min"]), _usd(r["cost_usd_per_month_max"]))
        con.print(d)
    if "sensitivity" in extras:
        table, rec = extras["sensitivity"]
        t = Table(title=f"Sensitivity of the decision ({rec['base_winner']}; ${rec['base_usd_per_month']:,.0f}/month over the loads)")
        for c in ("input", "low", "high", "USD/month at low", "USD/month at high", "crossover QPS low / high", "flips"):
            t.add_column(c, justify="right" if c.startswith(("USD", "crossover")) else "left")
        for r in table.to_dict("records"):
            t.add_row(r["input"], r["low_value"], r["high_value"], _usd(r["low_usd_per_month"]), _usd(r["high_usd_per_month"]),
                      f"{crossover_qps_text(r.get('low_crossover_qps'))} / {crossover_qps_text(r.get('high_crossover_qps'))}", r["flips_at"] or "no",
                      style="bold yellow" if r["flips_at"] else None)
        con.print(t)
        con.print(f"[bold]{rec['verdict']}[/bold]")
