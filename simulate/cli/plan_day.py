"""`costmodel plan --load-curve`: the options that turn plan's per-QPS search into a fleet over a
day (simulate.plan.day), and the tables it prints: the fleet per hour, the month's bills."""

from __future__ import annotations

import functools
import math
import time

import click
from click.core import ParameterSource

from costmodel import outputset
from costmodel.cli.checked import checked
from costmodel.fields import DAY_REQUESTS, MAX_REQUESTS
from costmodel.console import make_console, progress_lines
from costmodel.errors import UserError
from costmodel.options import parse_list, parse_profile_modes
from simulate.cluster.scaling import DEFAULT_COMPRESS, DEFAULT_LOAD_GB_PER_S, DEFAULT_STARTUP_S, Scaling
from costmodel.costing import PricingConfig, pricing_config
from simulate.plan.prefix_compare import parse_choice

# plan's options that mean nothing for a day: the curve sets the rate
NOT_WITH_DAY = ("qps", "refine_crossover")
# plan's options a day refuses, with why (never silently ignored)
REFUSED_WITH_DAY = {
    "seeds": "a day is one long run under --seed (its hours are its replicates): run it again with another --seed to compare",
    "sensitivity": "the day's sensitivity is its price table (costmodel report DAYDIR -o day.xlsx); for the model inputs' run plan --qps PEAK --sensitivity",
}


def day_options(f):
    """Adds --load-curve and its settings to `plan`; with --load-curve the command plans a day."""
    opts = [
        click.option("--load-curve", default=None, metavar="FILE|PRESET",
                     help="Plan a day: a CSV of time_s,qps, flat:QPS, diurnal:peak=30,trough=10,peak_hour=14, or a trace (Azure LLM inference, BurstGPT, Mooncake). Prints each hour's fleet "
                          "and the month's bill, autoscaled and static (docs/cluster.md)."),
        click.option("--compress", type=float, default=DEFAULT_COMPRESS, show_default=True,
                     help="[--load-curve] Simulate the day this many times faster (the curve and the autoscaler's clocks; requests at real speed). 1: real time."),
        click.option("--fleet", type=click.Path(dir_okay=False), default=None,
                     help="[--load-curve] Plan this fleet over the day instead: a JSON of pools mixing GPUs and modes, requests routed by class (docs/cluster.md)."),
        click.option("--load-scale", type=float, default=1.0, show_default=True,
                     help="[--load-curve] Multiply the curve's rates, or a trace's request rate (thinning or replicating requests)."),
        click.option("--autoscale-headroom", type=float, default=1.0, show_default=True,
                     help="[--load-curve] The autoscaled fleet keeps each replica at most this share of the peak fleet's load per replica (e.g. 0.85 where it misses the SLO on a rising load)."),
        click.option("--startup-s", type=float, default=DEFAULT_STARTUP_S, show_default=True,
                     help="[--load-curve] A new replica's start-up before loading weights (container, engine init; ASSUMED)."),
        click.option("--load-gb-per-s", type=float, default=DEFAULT_LOAD_GB_PER_S, show_default=True,
                     help="[--load-curve] Weight loading rate of a new replica (ASSUMED: local NVMe or network store)."),
        click.option("--every-fleet", is_flag=True, default=False,
                     help="[--load-curve] Simulate every fleet's day, also those listed as not simulated because their cost floor is above what the "
                          "answer can use (for the workbook's price what-ifs: costmodel report DAYDIR -o day.xlsx)."),
        click.option("--max-requests", type=int, default=None, callback=checked(MAX_REQUESTS),
                     help=f"[--load-curve] Allow a day above {DAY_REQUESTS.hi:,.0f} simulated requests over all its fleets ({DAY_REQUESTS.why}), "
                          "or a trace of more rows."),
    ]

    @functools.wraps(f)
    def command(*args, **kwargs):
        day = {k: kwargs.pop(k) for k in ("load_curve", "fleet", "compress", "load_scale", "autoscale_headroom", "startup_s", "load_gb_per_s", "max_requests", "every_fleet")}
        ctx = click.get_current_context()
        given = lambda name: ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)  # noqa: E731
        if day["load_curve"] is None:
            for name in ("fleet", "compress", "load_scale", "autoscale_headroom", "startup_s", "load_gb_per_s", "max_requests", "every_fleet"):
                if given(name):
                    raise UserError(f"--{name.replace('_', '-')} applies to --load-curve only", "add --load-curve, or drop it")
            return f(*args, **kwargs)
        for name in NOT_WITH_DAY:
            if given(name):
                raise UserError(f"--{name.replace('_', '-')} does not apply with --load-curve", "the curve sets the rate: drop it")
        for name, why in REFUSED_WITH_DAY.items():
            if given(name):
                raise UserError(f"--{name} does not apply with --load-curve", why)
        if day["fleet"] is not None:
            for name in ("hardware", "modes", "profiles"):
                if given(name):
                    raise UserError(f"--{name.rstrip('s')} does not apply with --fleet", "the fleet file names each pool's GPU and mode")
            if day["every_fleet"]:
                raise UserError("--every-fleet does not apply with --fleet", "a fleet file's pools are one fleet, simulated whole: drop --every-fleet")
            if given("scheduler"):
                raise UserError("--scheduler does not apply with --fleet", "a fleet file's day is one run: drop --scheduler")
            po = kwargs.get("pricing_options")
            if po is not None and getattr(po, "given", lambda: False)():
                raise UserError("pricing options do not apply with --fleet (each pool bills its price_usd_per_gpu_hour, or the catalog's)",
                                "set price_usd_per_gpu_hour in the fleet file's pools")
        return _plan_day(day, kwargs)

    for o in reversed(opts):
        command = o(command)
    return command


def _plan_day(day: dict, kw: dict) -> None:
    from simulate.plan.day import DayConfig, run_day, run_fleet_day, write_day  # the day's simulator (SimPy) loads for a day only
    from costmodel.costing.day_answer import answer  # the day's tables and answer (pandas) too: `plan` declares these options
    from costmodel.schemas.day import DAY_COMMAND, read_day

    t0 = time.perf_counter()
    caching = parse_choice(kw["prefix_caching"])
    if caching is not None and len(caching) > 1:
        raise UserError("--prefix-caching on,off compares two plans; a day runs one engine", "give --prefix-caching on or off, one day each")
    outputset.claim(kw["out"], DAY_COMMAND)  # checked and locked before the day runs
    pricing = pricing_config(kw["pricing_options"]) if kw.get("pricing_options") is not None else None
    scaling = Scaling(startup_s=day["startup_s"], load_gb_per_s=day["load_gb_per_s"])
    cfg = DayConfig(load=day["load_curve"], slo=kw["slo"], hardware=parse_list(kw["hardware"], "hardware"), modes=parse_profile_modes(kw["modes"]),
                    workload=kw["workload"], seed=kw["seed"], compress=day["compress"], duration_s=kw["duration_s"],
                    max_replicas=kw["max_replicas"], scaling=scaling, jobs=kw["jobs"], load_scale=day["load_scale"],
                    autoscale_headroom=day["autoscale_headroom"], profiles=list(kw["profiles"]), pricing=pricing or PricingConfig(),
                    prefix_caching=None if caching is None else caching[0], max_requests=day["max_requests"] or int(DAY_REQUESTS.hi),
                    scheduler=kw.get("scheduler"), every_fleet=day["every_fleet"])
    err = make_console(stderr=True)
    say = progress_lines(err)
    out = run_fleet_day(cfg, day["fleet"], progress=say) if day["fleet"] else run_day(cfg, progress=say)
    written = write_day(out, kw["out"])
    con = make_console()
    print_hours(con, out)
    last = print_bills(con, out)
    con.print("wrote " + ", ".join(str(p) for p in written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")
    if last is None:  # the answer last, as plan's (the words the report's answer box prints: reports/day.py)
        last = f"[bold]{answer(read_day(kw['out'])).text}[/bold]"
    con.print(last, soft_wrap=True)


def _money(x) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def print_hours(con, out) -> None:
    """Per hour: the offered rate and, per (GPU, mode) autoscaled or per pool of a fleet, the mean
    replicas and SLO attainment."""
    from rich.table import Table

    h = out.hours
    if not len(h):
        return
    auto = h[h.policy == "autoscaled"] if (h.policy == "autoscaled").any() else h[h.pool != "fleet"]
    key = (lambda r: (r["hardware"], r["mode"])) if (h.policy == "autoscaled").any() else (lambda r: (r["pool"],))
    groups = {}
    for r in auto.to_dict("records"):
        groups.setdefault(key(r), {})[r["hour"]] = r
    kind = "Autoscaled fleet" if (h.policy == "autoscaled").any() else "Fleet"
    t = Table(title=f"{kind} per hour: mean replicas (SLO attainment %, * = hour misses {out.config.slo})")
    t.add_column("hour", justify="right")
    t.add_column("QPS", justify="right")
    for k in groups:
        t.add_column("\n".join(k), justify="right")
    offered = h[h.pool == h.pool.iloc[-1]].groupby("hour").offered_qps.first() if kind == "Fleet" else auto.groupby("hour").offered_qps.first()
    for hour in sorted(auto.hour.unique()):
        cells = []
        for g in groups.values():
            r = g[hour]
            cells.append(f"{r['replicas_mean']:.1f} ({100 * r['slo_attainment']:.1f}){'' if r['meets_slo'] else '*'}")
        t.add_row(f"{hour:g}", f"{offered[hour]:.1f}", *cells)
    con.print(t)


def print_bills(con, out) -> str | None:
    """The month's table; returns a fleet file's total line to print last (None: the caller prints the
    day's answer, costmodel.costing.day_answer.answer, from the written output set)."""
    from rich.table import Table

    from costmodel.schemas.day import bill_order
    from simulate.plan.day_bounds import NOT_SIMULATED

    priced = f"{out.config.pricing.model} pricing" if out.prices else "each pool's price"
    t = Table(title=f"The month ({out.curve.source}; SLO {out.config.slo}; {priced}; those missing the SLO in any hour last, marked *)")
    for c in ("GPU", "mode", "fleet", "replicas", "SLO attain %", "hours OK", "GPU-h/day", "kWh/month", "$/month", "vs static"):
        t.add_column(c, justify="left" if c in ("GPU", "mode", "fleet") else "right")
    bills = sorted(out.bills, key=bill_order)
    for b in bills:
        if b.note.startswith(NOT_SIMULATED):  # its floor in the $/month column, the whole note under the table
            t.add_row(b.hardware, b.mode, {"static": "static (peak)"}.get(b.policy, b.policy), "", "", NOT_SIMULATED, "", "",
                      ">= " + b.note.split("$", 1)[1].split("/", 1)[0], "", style="dim")
            continue
        if b.note:
            t.add_row(b.hardware, b.mode, b.policy, "", "", "", "", "", "", b.note[:40], style="dim")
            continue
        miss = "" if b.meets_slo_every_hour else "*"
        fleet = {"autoscaled": b.autoscaler, "static": "static (peak)"}.get(b.policy, f"{b.policy}: {b.autoscaler}" if b.policy != "fleet" else "whole fleet")
        t.add_row(b.hardware, b.mode, fleet, f"{b.replicas_min}-{b.replicas_max}",
                  f"{100 * b.slo_attainment:.2f}" if math.isfinite(b.slo_attainment) else "n/a (no requests)", f"{b.hours_meeting_slo}/{b.hours}{miss}" + (f" ({b.hours_borderline} borderline)" if b.hours_borderline else ""),
                  f"{b.gpu_hours_per_day:,.1f}",
                  f"{b.energy_kwh_per_month:,.0f}",
                  _money(b.cost_usd_per_month) if not b.cost_low < b.cost_usd_per_month else f"{_money(b.cost_low)}-{_money(b.cost_usd_per_month)}",
                  "" if b.policy == "static" or not math.isfinite(b.saving_vs_static_frac) else f"{round(-100 * b.saving_vs_static_frac) + 0:+d}%",
                  style=None if miss == "" else "dim")
    con.print(t)
    for b in bills:
        if b.note.startswith(NOT_SIMULATED):
            con.print(f"[dim]{b.hardware}/{b.mode} {b.policy}: {b.note}[/dim]", soft_wrap=True)
    whole = [b for b in bills if b.policy == "fleet"] or bills
    if any(b.policy not in ("autoscaled", "static") for b in bills):  # a fleet file: its own total
        b = whole[0]
        return (f"[bold]the fleet: ${b.cost_usd_per_month:,.0f} per month, SLO attainment {100 * b.slo_attainment:.2f}%, "
                f"{b.hours_meeting_slo}/{b.hours} hours meeting the SLO[/bold]")
    return None

