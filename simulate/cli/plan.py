"""`costmodel plan`: options -> simulate.plan.api.PlanConfig -> run_plan -> write_plan; prints the tables. The table
libraries (pandas, rich's tables) load where they are used: `plan --help` needs neither, and a plan forks its workers
before they load (simulate/plan/api.py run_plan)."""

from __future__ import annotations

import math
import time

import click

from costmodel import outputset
from simulate.cli.plan_day import day_options
from costmodel.cli.checked import checked
from simulate.cli.plan_extras import check_seeds, extras_options, print_extras
from costmodel.cli.pricing_options import pricing_options
from costmodel.console import make_console, progress_lines
from costmodel.costing import PricingConfig, pricing_config
from costmodel.errors import UserError
from costmodel.fields import MAX_REPLICAS, REFINE_CROSSOVER
from costmodel.options import parse_floats, parse_list, parse_profile_modes
from simulate.plan.prefix_compare import parse_choice
from simulate.plan.settle import DEFAULT_MAX_REPLICATIONS, MIN_REPLICATIONS
from simulate.plan.api import (
    DEFAULT_CROSSOVER_STEPS, DEFAULT_DURATION_S, DEFAULT_HARDWARE, DEFAULT_MAX_REPLICAS, DEFAULT_SLO, PlanConfig, plan_provenance, run_plan,
    write_plan,
)


def _money(x) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}")


def _text(v) -> str:
    """A table cell: empty for a missing value (None, NaN, pandas' NA), never "nan"."""
    import pandas as pd  # (loaded: the cells are a frame)

    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) or v is pd.NA else str(v)


def print_analysis(con, a) -> None:
    """The rich tables: every (GPU, mode, QPS) and the cheapest per QPS (ties named as ties)."""
    import pandas as pd
    from rich.table import Table

    t = Table(title=f"Fewest replicas meeting {a.slo.text or 'stability'} ({a.pricing.model} pricing)")
    for c in ("hardware", "mode", "qps", "replicas", "$/month", "$/1M out tok", "meets SLO", "binding limit", "why not / borderline"):
        t.add_column(c, justify="left" if c in ("hardware", "mode", "why not") else "right")
    for r in a.cells.to_dict("records"):
        rep = r.get("replicas")
        ok = bool(r.get("meets_slo"))
        style = "bold green" if r.get("cheapest_at_qps") else ("dim" if not ok else None)
        mtok = r.get("cost_usd_per_mtok_output")
        t.add_row(str(r["hardware"]), str(r["mode"]), f"{r['qps']:g}", "" if rep is None or pd.isna(rep) else str(int(rep)),
                  _money(r.get("cost_usd_per_month")) if ok else "",
                  f"{mtok:.3f}" if ok and isinstance(mtok, float) and math.isfinite(mtok) else "",
                  "yes" if ok else "no", _text(r.get("binding_limit")) if ok else "", _text(r.get("borderline")) if ok else _text(r.get("slo_failures")),
                  style=style)
    con.print(t)
    c = Table(title="Cheapest SLO-meeting option per QPS")
    for col in ("qps", "hardware / mode", "replicas", "$/month", "$/1M out tok", "runner-up", "runner-up $/month"):
        c.add_column(col, justify="left" if col in ("hardware / mode", "runner-up") else "right")
    for r in a.cheapest.to_dict("records"):
        if r["none_meets"]:
            c.add_row(f"{r['qps']:g}", "no option meets the SLO", "", "", "", "", "")
        else:
            who = " = ".join([f"{r['hardware']} / {r['mode']}"] + (r["tied_with"].split(", ") if r.get("tie") else [])) + (" (tie)" if r.get("tie") else "")
            low = r.get("cost_usd_per_month_low")
            usd = _money(r["cost_usd_per_month"]) if low is None or not low < r["cost_usd_per_month"] else f"{_money(low)}-{_money(r['cost_usd_per_month'])}"
            c.add_row(f"{r['qps']:g}", who, str(r["replicas"]), usd,
                      f"{r['cost_usd_per_mtok_output']:.3f}", r.get("runner_up", ""), _money(r.get("runner_up_cost_usd_per_month")))
    con.print(c)
    con.print(f"[dim]crossover, how: {a.crossover.method}[/dim]")


def print_answer(con, a, profiles: dict, modes) -> None:
    """The answer, last (costmodel/costing/answer.py: the words the HTML, the workbook and the CSV print)."""
    from costmodel.costing import answer_lines

    lines = answer_lines(a, plan_provenance(profiles, modes))  # the provenance plan.json and answer.csv carry (the held-out error with it)
    for line in lines[:-1]:
        con.print(line, soft_wrap=True)
    if lines:
        con.print(f"[bold]{lines[-1]}[/bold]", soft_wrap=True)


@click.command()
@click.option("--qps", default="5,20,50", show_default=True, help="Offered loads (requests/s), comma-separated.")
@click.option("--slo", default=DEFAULT_SLO, show_default=True, help="Latency bounds: STAT_METRIC_ms<=LIMIT, comma-separated.")
@click.option("--hardware", default=",".join(DEFAULT_HARDWARE), show_default=True, help="GPU catalog ids, comma-separated.")
@click.option("--mode", "modes", default=None, show_default="the modes every planned GPU's profile carries", help="Serving modes, comma-separated.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(), help="A profile JSON (repeatable); it replaces the shipped default for its GPU (added to --hardware if absent).")
@pricing_options
@day_options
@click.option("--workload", type=click.Path(dir_okay=False), default=None, help="Workload JSON (arrivals, regime mix, lengths, or a trace); default: the simulator's.")
@click.option("--duration", "duration_s", type=float, default=DEFAULT_DURATION_S, show_default="from the load: 300 arrivals within 20-120 s",
              help="Simulated seconds of arrivals per replication; a point runs replications until its SLO verdict settles "
                   "(every figure's 95% interval on one side of its bound), so its simulated time follows from the verdict.")
@click.option("--max-replications", type=int, default=DEFAULT_MAX_REPLICATIONS, show_default=True,
              help=f"Replications a point may take (at least {MIN_REPLICATIONS}) before it is reported borderline with its intervals.")
@click.option("--seed", type=int, default=0, show_default=True, help="Replication i of seed s simulates the simulator's seed 1000*s + i.")
@extras_options
@click.option("--max-replicas", type=int, default=DEFAULT_MAX_REPLICAS, show_default=True, callback=checked(MAX_REPLICAS), help="Give up on a (GPU, mode, QPS) above this many replicas.")
@click.option("--refine-crossover", type=int, default=DEFAULT_CROSSOVER_STEPS, show_default=True, callback=checked(REFINE_CROSSOVER),
              help="Bisect the crossover bracket at most this many times (each simulates its midpoint QPS for every GPU and mode; it stops "
                   "once the bracket is within 5% of its upper end); 0: the --qps grid only.")
@click.option("--jobs", type=int, default=None, help="Local worker processes, forked, no Dask (default: the CPUs available; 1 runs serially).")
@click.option("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://HOST:8786 (default: $DASK_SCHEDULER_ADDRESS, else a local cluster).")
@click.option("--prefix-caching", "prefix_caching", default=None,
              help="vLLM's prefix caching: on (vLLM's default), off, or on,off to plan both and compare fleet, cost and TTFT (written to "
                   "OUT/prefix-caching-on and OUT/prefix-caching-off).")
@click.option("-o", "--out", "out", type=click.Path(file_okay=False), required=True, help="Directory for plan.csv, its dictionary and plan.json.")
def plan(qps, slo, hardware, modes, profiles, pricing_options, workload, duration_s, max_replications, seed, seeds, max_seeds, sensitivity, max_replicas, refine_crossover,
         jobs, scheduler, prefix_caching, out):
    """Fewest replicas meeting an SLO per (GPU, mode, QPS), their monthly cost, the cheapest option
    per QPS and the crossover QPS above which DiffusionGemma stops being the cheapest.

    \b
    costmodel plan --qps 5,20,50 --slo "p95_ttft_ms<=1000,p95_e2e_ms<=5000" -o out/plan
    costmodel plan --onprem --electricity-usd-per-kwh 0.08 --pue 1.2 --amortisation-years 4 -o out/plan-onprem
    """
    t0 = time.perf_counter()
    caching = parse_choice(prefix_caching)
    if caching is not None and len(caching) > 1:
        return _compare_prefix_caching(locals())
    outputset.claim(out, "plan")  # checked and locked before any search runs
    pricing = pricing_config(pricing_options)
    check_seeds(seeds, max_seeds)
    cfg = PlanConfig(qps=parse_floats(qps, "qps"), slo=slo, hardware=parse_list(hardware, "hardware"), modes=parse_profile_modes(modes),
                     profiles=list(profiles), pricing=pricing or PricingConfig(), workload=workload, duration_s=duration_s, seed=seed,
                     max_replications=max_replications, max_replicas=max_replicas, refine_crossover=refine_crossover, jobs=jobs, scheduler=scheduler,
                     prefix_caching=None if caching is None else caching[0])
    err = make_console(stderr=True)
    say = progress_lines(err)
    outcome = run_plan(cfg, progress=say, meanwhile=_table_library)
    from simulate.plan.sensitivity import plan_extras  # (after the plan: it loads the analysis, as the plan has by now)

    outcome.extras.update(plan_extras(cfg, outcome, seeds, sensitivity, progress=say))
    con = make_console()

    def tables() -> None:  # printed while the files are written
        print_analysis(con, outcome.analysis)
        print_extras(con, outcome.extras)

    written = write_plan(outcome, out, meanwhile=tables)
    points = [p for c in outcome.cells for p in c.points]
    con.print(f"{len(points)} points, {sum(int(p.get('replications', 1)) for p in points)} simulations; wrote " + ", ".join(str(p) for p in written))
    con.print(f"wall time: {time.perf_counter() - t0:.1f} s")
    if cfg.prefix_caching is False:  # an option that changed nothing says so (simulate/cli/prefix_note.py)
        from simulate.cli.prefix_note import caching_off_note

        note = caching_off_note(workload, "--prefix-caching off", sum(int(p.get("preemptions") or 0) for c in outcome.cells for p in c.points))
        if note:
            con.print(note, soft_wrap=True)
    print_answer(con, outcome.analysis, outcome.profiles, cfg.modes)


def _table_library() -> None:
    """rich's tables, loaded while the plan's workers simulate (run_plan's meanwhile): they print at the end."""
    import rich.table  # noqa: F401


def _compare_prefix_caching(a: dict) -> None:
    """--prefix-caching on,off: one plan per setting, each its own output set under OUT, and their
    cells side by side (simulate/plan/prefix_compare.py)."""
    from pathlib import Path

    from rich.table import Table

    from simulate.plan.prefix_compare import compare

    if a["seeds"] != 1 or a["sensitivity"]:
        raise UserError("--prefix-caching on,off compares two plans; replicates and sensitivity apply to one", "drop --seeds / --sensitivity")
    pricing = pricing_config(a["pricing_options"])
    con, say = make_console(), progress_lines(make_console(stderr=True))
    dirs = {v: Path(a["out"]) / f"prefix-caching-{'on' if v else 'off'}" for v in (True, False)}
    for d in dirs.values():
        outputset.claim(d, "plan")
    cells = {}
    for v, d in dirs.items():
        cfg = PlanConfig(qps=parse_floats(a["qps"], "qps"), slo=a["slo"], hardware=parse_list(a["hardware"], "hardware"), modes=parse_profile_modes(a["modes"]),
                         profiles=list(a["profiles"]), pricing=pricing or PricingConfig(), workload=a["workload"], duration_s=a["duration_s"],
                         max_replications=a["max_replications"], seed=a["seed"], max_replicas=a["max_replicas"], refine_crossover=a["refine_crossover"], jobs=a["jobs"],
                         scheduler=a["scheduler"], prefix_caching=v)
        outcome = run_plan(cfg, progress=lambda s, v=v: say(f"prefix caching {'on' if v else 'off'}: {s}"))
        write_plan(outcome, d)
        cells[v] = outcome.analysis.cells
    table = compare(cells[True], cells[False])
    t = Table(title="Prefix caching on vs off: fleet meeting the SLO, its cost and TTFT there")
    for c in table.columns:
        title = (c.replace("cost_usd_per_month", "$/month").replace("prefix_hit_rate_tokens", "hit rate").replace("ttft_ms_", "TTFT ms ")
                 .replace("_on", " on").replace("_off", " off"))
        t.add_column(title, justify="left" if c in ("hardware", "mode") else "right")
    for row in table.itertuples(index=False):
        t.add_row(*[(f"{x:,.0f}" if c.startswith("cost") else f"{x:,.3g}") if isinstance(x, float) else str(x) for c, x in zip(table.columns, row)])
    con.print(t)
    con.print(f"wrote {dirs[True]} and {dirs[False]} (a plan each); wall time: {time.perf_counter() - a['t0']:.1f} s")
