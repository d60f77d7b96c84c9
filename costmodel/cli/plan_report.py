"""`costmodel plan` and `costmodel report`."""

from __future__ import annotations

import time
from pathlib import Path

import click

from costmodel.errors import UserError
from costmodel.modes import mode_names

DEFAULT_DURATION_S = 60.0
# the defaults `plan` runs on (costmodel plan with no options); kept import-light for a fast --help
DEFAULT_SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=5000"
DEFAULT_HARDWARE = ("h100-sxm", "h200", "rtx-5090")
DEFAULT_MAX_REPLICAS = 64


def pricing_options(f):
    """The pricing options shared by plan and report."""
    opts = [
        click.option("--price", multiple=True, metavar="GPU=USD", help="Cloud rental per GPU-hour, overriding the catalog (repeatable or comma-separated), e.g. --price h200=3.50."),
        click.option("--onprem", is_flag=True, help="Price owned GPUs: purchase price amortised over --amortisation-years, plus electricity."),
        click.option("--purchase-usd", multiple=True, metavar="GPU=USD", help="[--onprem] purchase price per GPU, overriding the catalog, e.g. --purchase-usd h200=30000."),
        click.option("--electricity-usd-per-kwh", type=float, default=None, help="[--onprem] electricity price (default 0.08, aiinframap.com TCO tool)."),
        click.option("--amortisation-years", type=float, default=None, help="[--onprem] straight-line write-off period (default 4)."),
        click.option("--pue", type=float, default=None, help="Facility power / IT power for energy and on-prem electricity (default 1.2; industry average 1.58)."),
        click.option("--telemetry", multiple=True, type=click.Path(), metavar="RUN",
                     help="A measured run directory: its telemetry's mean busy power_w replaces the board power for its GPU."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def build_pricing(price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry):
    """A PricingConfig from the options, or None when none was given."""
    from costmodel.options import parse_key_values
    from plan.pricing import DEFAULT_AMORTISATION_YEARS, DEFAULT_ELECTRICITY_USD_PER_KWH, DEFAULT_PUE, PricingConfig, telemetry_power

    given = bool(price or onprem or purchase_usd or telemetry) or any(x is not None for x in (electricity_usd_per_kwh, amortisation_years, pue))
    if not given:
        return None
    if not onprem:
        for name, v in (("--purchase-usd", purchase_usd), ("--electricity-usd-per-kwh", electricity_usd_per_kwh), ("--amortisation-years", amortisation_years)):
            if v:
                raise UserError(f"{name} prices owned GPUs, but --onprem is not set", f"add --onprem, or drop {name} (cloud rental includes power and ownership)")
    elif price:
        raise UserError("--price sets a cloud rental, but --onprem prices owned GPUs", "drop --price, or use --purchase-usd GPU=USD with --onprem")
    power, psrc = {}, {}
    for run in telemetry:
        hw, w, src = telemetry_power(run)
        power[hw], psrc[hw] = w, src
    return PricingConfig(
        onprem=onprem,
        price_usd_per_gpu_hour=parse_key_values(price, "price"),
        purchase_usd=parse_key_values(purchase_usd, "purchase-usd"),
        electricity_usd_per_kwh=DEFAULT_ELECTRICITY_USD_PER_KWH if electricity_usd_per_kwh is None else electricity_usd_per_kwh,
        pue=DEFAULT_PUE if pue is None else pue,
        amortisation_years=DEFAULT_AMORTISATION_YEARS if amortisation_years is None else amortisation_years,
        active_power_w=power, active_power_source=psrc,
    ).validate()


def _money(x) -> str:
    import math

    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}")


def print_analysis(con, a) -> None:
    """The rich tables: every (GPU, mode, QPS), the cheapest per QPS, and the crossover lines."""
    import math

    import pandas as pd
    from rich.table import Table

    t = Table(title=f"Fewest replicas meeting {a.slo.text or 'stability'} ({'on-prem' if a.pricing.onprem else 'cloud'} pricing)")
    for c in ("hardware", "mode", "qps", "replicas", "$/month", "$/1M out tok", "meets SLO", "why not"):
        t.add_column(c, justify="left" if c in ("hardware", "mode", "why not") else "right")
    for r in a.cells.to_dict("records"):
        rep = r.get("replicas")
        ok = bool(r.get("meets_slo"))
        style = "bold green" if r.get("cheapest_at_qps") else ("dim" if not ok else None)
        mtok = r.get("cost_usd_per_mtok_output")
        t.add_row(str(r["hardware"]), str(r["mode"]), f"{r['qps']:g}", "" if rep is None or pd.isna(rep) else str(int(rep)),
                  _money(r.get("cost_usd_per_month")) if ok else "",
                  f"{mtok:.3f}" if ok and isinstance(mtok, float) and math.isfinite(mtok) else "",
                  "yes" if ok else "no", "" if ok else str(r.get("slo_failures", ""))[:70], style=style)
    con.print(t)
    c = Table(title="Cheapest SLO-meeting option per QPS")
    for col in ("qps", "hardware / mode", "replicas", "$/month", "$/1M out tok", "runner-up", "runner-up $/month"):
        c.add_column(col, justify="left" if col in ("hardware / mode", "runner-up") else "right")
    for r in a.cheapest.to_dict("records"):
        if r["none_meets"]:
            c.add_row(f"{r['qps']:g}", "no option meets the SLO", "", "", "", "", "")
        else:
            c.add_row(f"{r['qps']:g}", f"{r['hardware']} / {r['mode']}", str(r["replicas"]), _money(r["cost_usd_per_month"]),
                      f"{r['cost_usd_per_mtok_output']:.3f}", r.get("runner_up", ""), _money(r.get("runner_up_cost_usd_per_month")))
    con.print(c)
    con.print(f"[bold]{a.crossover.text}[/bold]")
    for x in a.crossover_by_hardware.values():
        con.print(f"  {x.text}")
    con.print(f"[dim]how: {a.crossover.method}[/dim]")


@click.command()
@click.option("--qps", default="5,20,50", show_default=True, help="Offered loads (requests/s), comma-separated.")
@click.option("--slo", default=DEFAULT_SLO, show_default=True, help="Latency bounds: STAT_METRIC_ms<=LIMIT, comma-separated.")
@click.option("--hardware", default=",".join(DEFAULT_HARDWARE), show_default=True, help="GPU catalog ids, comma-separated.")
@click.option("--mode", "modes", default=",".join(mode_names()), show_default=True, help="Serving modes, comma-separated.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(), help="A profile JSON (repeatable); it replaces the shipped default for its GPU (added to --hardware if absent).")
@pricing_options
@click.option("--workload", type=click.Path(dir_okay=False), default=None, help="Workload JSON (arrivals, regime mix, lengths, or a trace); default: the simulator's.")
@click.option("--duration", "duration_s", type=float, default=DEFAULT_DURATION_S, show_default=True, help="Simulated seconds of arrivals per point (the simulator's own default is 300 s; 60 s keeps plan + report under a minute on 2 CPU cores).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS, show_default=True, help="Give up on a (GPU, mode, QPS) above this many replicas.")
@click.option("--refine-crossover", type=int, default=0, show_default=True,
              help="Narrow the crossover bracket: this many times, simulate its midpoint QPS for every GPU and mode.")
@click.option("--jobs", type=int, default=None, help="Parallel processes (default: the CPUs available).")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True, help="Directory for plan.csv, its dictionary and plan.json.")
def plan(qps, slo, hardware, modes, profiles, price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry,
         workload, duration_s, seed, max_replicas, refine_crossover, jobs, out):
    """Fewest replicas meeting an SLO per (GPU, mode, QPS), their monthly cost, the cheapest option
    per QPS and the crossover QPS above which DiffusionGemma stops being the cheapest.

    \b
    costmodel plan --qps 5,20,50 --slo "p95_ttft_ms<=1000,p95_e2e_ms<=5000" -o out/plan
    costmodel plan --onprem --electricity-usd-per-kwh 0.08 --pue 1.2 --amortisation-years 4 -o out/plan-onprem
    """
    t0 = time.perf_counter()
    from costmodel.console import make_console
    from costmodel.options import parse_floats, parse_list, parse_modes
    from costmodel.shipped import resolve_profile
    from plan import planner as planmod
    from plan.cheapest import analyse
    from reports.csv_export import write_finance_csv
    from plan.pricing import PricingConfig
    from reports.provenance import profile_provenance
    from reports.results import records, write_plan_json
    from plan.slo import parse_slo

    slo_obj = parse_slo(slo)
    qps_values = sorted(set(parse_floats(qps, "qps")))
    mode_list = parse_modes(modes)
    hw_list = list(dict.fromkeys(parse_list(hardware, "hardware")))
    if not duration_s > 0:
        raise UserError(f"--duration {duration_s} is not positive", "give simulated seconds per point, e.g. 60")
    if max_replicas < 1:
        raise UserError(f"--max-replicas {max_replicas} is below 1", "give an integer >= 1")
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs {jobs} is below 1", "give an integer >= 1")
    if refine_crossover < 0:
        raise UserError(f"--refine-crossover {refine_crossover} is negative", "give the number of extra midpoints to simulate, e.g. 2")
    profile_paths: dict[str, str | None] = {}
    loaded = {}
    for p in profiles:
        prof = resolve_profile(p, "")
        hid = prof.hardware.get("id")
        if hid in profile_paths:
            raise UserError(f"two --profile files are for {hid}", "pass one profile per GPU")
        profile_paths[hid], loaded[hid] = str(Path(p).resolve()), prof
        if hid not in hw_list:
            hw_list.append(hid)
    for h in hw_list:
        if h not in loaded:
            loaded[h] = resolve_profile(None, h)
            profile_paths[h] = None
        for m in mode_list:
            loaded[h].mode(m)  # a profile lacking a requested mode fails here, before any simulation
    pricing = build_pricing(price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry) or PricingConfig()
    specs = {h: loaded[h].hardware_spec() for h in hw_list}
    pricing.check_hardware(specs)
    if pricing.onprem:
        from plan.pricing import gpu_price

        for s in specs.values():
            gpu_price(s, pricing)  # a GPU with no purchase price fails now, not after the simulations

    if workload:
        from simulate.api import resolve_workload

        wl = resolve_workload(workload)  # a malformed workload fails here, before any simulation
        if wl.recorded_rate:
            raise UserError(f"workload {workload} replays its trace at the recorded rate", 'plan sets the rate per QPS: use "trace_time_scale": "qps"')
        workload = str(Path(workload).resolve())
    settings = planmod.PlanSettings(list(qps_values), slo_obj.text, hw_list, mode_list, profile_paths, duration_s, seed, max_replicas,
                                    jobs or planmod.default_jobs(), workload, refine_crossover)
    err = make_console(stderr=True)
    err.print(f"plan: {len(hw_list)} GPUs x {len(mode_list)} modes x {len(qps_values)} QPS, {duration_s:g} simulated s per point, "
              f"{settings.jobs} processes")
    show = lambda s: err.print(f"[dim]{s}[/dim]")  # noqa: E731
    cells = planmod.run_searches(settings, progress=show)
    a = analyse(planmod.points_frame(cells), slo_obj, pricing, specs, qps_values, planmod.cell_notes(cells))
    for _ in range(refine_crossover):
        c = a.crossover
        if c.status != "bracketed":
            err.print(f"crossover refinement stops: the crossover is {c.status}, not bracketed")
            break
        q = planmod.refine_point(c.qps_low, c.qps_high)
        if q in qps_values:
            err.print(f"crossover refinement stops: the bracket {c.qps_low:g}-{c.qps_high:g} QPS has no new midpoint at 3 significant digits")
            break
        err.print(f"refining the crossover: simulating {q:g} QPS inside the bracket {c.qps_low:g}-{c.qps_high:g}")
        starts, skip = planmod.bracket_starts(cells, c.qps_low, c.qps_high, max_replicas)
        cells += planmod.run_searches(settings, progress=show, qps=[q], starts=starts, skip=skip)
        qps_values = sorted(qps_values + [q])
        a = analyse(planmod.points_frame(cells), slo_obj, pricing, specs, qps_values, planmod.cell_notes(cells))
    settings.qps = qps_values

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = write_finance_csv(a.cells, out_dir / "plan.csv")
    wall = time.perf_counter() - t0
    doc = {
        "settings": settings.to_dict(), "slo": slo_obj.text, "pricing": pricing.to_dict(),
        "hardware_specs": {h: s.to_dict() for h, s in specs.items()},
        "profiles": {h: profile_provenance(loaded[h], modes=set(mode_list)) for h in hw_list},
        "searches": planmod.probes_record(cells),
        "points": records(planmod.points_frame(cells)),
        "cell_notes": [{"hardware": h, "mode": m, "qps": q, "note": n} for (h, m, q), n in planmod.cell_notes(cells).items()],
        "results": {"cells": records(a.cells), "cheapest": records(a.cheapest), "crossover": a.crossover.to_dict(),
                    "crossover_by_hardware": {h: c.to_dict() for h, c in a.crossover_by_hardware.items()},
                    "prices": {h: p.__dict__ for h, p in a.prices.items()}},
        "simulations": sum(len(c.probes) for c in cells),
        "wall_s": wall,
    }
    written.append(write_plan_json(out_dir / "plan.json", doc))
    con = make_console()
    print_analysis(con, a)
    con.print(f"{doc['simulations']} simulations; wrote " + ", ".join(str(p) for p in written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")


@click.command()
@click.argument("results", type=click.Path())
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="out.csv (finance CSV + out.dictionary.csv/.md) or out.html.")
@click.option("--slo", default=None, help="SLO to judge points by (default: the plan's; for simulate results: stability only).")
@pricing_options
def report(results, out, slo, price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry):
    """Export `costmodel plan -o` or `costmodel simulate -o` results as a finance CSV (with its data
    dictionary) or a self-contained HTML report with charts.

    Pricing options, when any is given, replace the plan's pricing (the replica counts do not
    depend on price, so the cheapest option and crossover are recomputed without re-simulating).

    \b
    costmodel report out/plan -o out/plan-report.html
    costmodel report out/sim -o out/finance.csv --price h200=3.50
    """
    t0 = time.perf_counter()
    from costmodel import atomic
    from costmodel.console import make_console
    from plan.cheapest import analyse
    from reports.csv_export import write_finance_csv
    from plan.pricing import PricingConfig
    from reports.results import load_results
    from plan.slo import STABLE_ONLY, parse_slo

    suffix = Path(out).suffix.lower()
    if suffix not in (".csv", ".html", ".htm"):
        raise UserError(f"-o {out}: the output must end in .csv or .html", "e.g. -o report.html or -o finance.csv")
    res = load_results(results)
    slo_obj = parse_slo(slo) if slo else (parse_slo(res.slo) if res.slo else STABLE_ONLY)
    con = make_console()
    if res.kind == "plan" and slo and slo_obj.text != parse_slo(res.slo).text:
        con.print(f"[yellow]note: the plan searched replicas for {res.slo}; judged by {slo_obj.text}, each cell shows the cheapest of the "
                  f"replica counts that search evaluated, which need not be the fewest: re-run `costmodel plan --slo` for those[/yellow]")
    pricing = build_pricing(price, onprem, purchase_usd, electricity_usd_per_kwh, amortisation_years, pue, telemetry) or res.pricing or PricingConfig()
    a = analyse(res.points, slo_obj, pricing, res.specs, res.qps, res.cell_notes)
    if suffix == ".csv":
        table = a.cells if res.kind == "plan" else a.points
        written = write_finance_csv(table, out)
    else:
        from reports.html import render

        written = [atomic.write_text(out, render(res, a))]
    con.print(f"[bold]{a.crossover.text}[/bold]")
    con.print("wrote " + ", ".join(str(p) for p in written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")
