"""The plan artefact (`costmodel plan -o DIR`): plan.json (settings, SLO, pricing, hardware specs,
profile provenance, every replica search and simulated point, the analysis) beside plan.csv and its
data dictionary. `report` reads plans through this module. The columns a plan adds to the
simulator's (costs, SLO verdicts) are documented here, once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel.errors import UserError
from costmodel.jsonfile import jsonable, read_json
from costmodel.schemas.columns import ColumnDoc

if TYPE_CHECKING:
    import pandas as pd

PLAN_KIND = "costmodel-plan"
PLAN_SCHEMA_VERSION = 1
PLAN_JSON = "plan.json"
HOURS_PER_MONTH = 730.0  # 8,760 h / 12

COST = "costmodel/costing/costs.py from the simulated point and the GPU price"
PRICE = "pricing: the row's price_source column (catalog source or user override)"
PLAN = "costmodel plan / report (costmodel/costing/cheapest.py)"
SENS = "costmodel plan --seeds / --sensitivity (simulate/plan/sensitivity.py)"
VERDICT = "costmodel/costing/verdict.py, on the replications' intervals"
SETTLE = "costmodel plan's replications (simulate/plan/settle.py)"
PLAN_DOCS = (
    ColumnDoc("meets_slo", "true when the point is stable and every SLO bound holds", "boolean", PLAN),
    ColumnDoc("gpus", "GPUs in use = replicas x gpus_per_replica", "count", COST),
    ColumnDoc("gpus_per_replica", "GPUs one model replica occupies (one per replica in every shipped configuration)", "count", COST),
    ColumnDoc("cost_usd_per_month", f"GPU cost of the configuration for a month of {HOURS_PER_MONTH:g} hours (8,760 h / 12) = cost_usd_per_hour x {HOURS_PER_MONTH:g}", "USD/month", COST),
    ColumnDoc("cost_usd_per_hour", "GPU cost of the configuration per hour = gpus x (rate_usd_per_gpu_hour + electricity_usd_per_gpu_hour)", "USD/hour", COST),
    ColumnDoc("cost_usd_per_mtok_output", "cost per million output (generated) tokens = cost_usd_per_hour / (output_tokens_per_s x 3600) x 1e6; empty when nothing was served", "USD per 1M output tokens", COST),
    ColumnDoc("cost_usd_per_mtok_total", "cost per million total tokens (prompt + output) = cost_usd_per_hour / (total_tokens_per_s x 3600) x 1e6", "USD per 1M tokens", COST),
    ColumnDoc("cost_usd_per_1k_requests", "cost per thousand completed requests = cost_usd_per_hour / (throughput_rps x 3600) x 1000", "USD per 1k requests", COST),
    ColumnDoc("energy_kwh_per_mtok_output", "facility energy per million output tokens = facility_power_kw / (output_tokens_per_s x 3600) x 1e6 (includes PUE)", "kWh per 1M output tokens", COST),
    ColumnDoc("facility_power_kw", "facility power of the configuration = gpus x (power_w_per_gpu + host power per GPU, on-prem) x PUE / 1000", "kW", COST),
    ColumnDoc("power_w_per_gpu", "GPU power at this point's utilisation = active power (board power, or measured telemetry) x gpu_busy_frac; idle draw not included", "W", "the row's power_source column"),
    ColumnDoc("pricing_basis", "the pricing model (--pricing): on-demand rental; reserved-1y / reserved-3y = committed-use rental at a discount; spot = spot rental with an on-demand fallback; onprem = purchase + host amortised over their life plus electricity", "-", PRICE),
    ColumnDoc("rate_usd_per_gpu_hour", "per-GPU effective hourly rate before electricity: the on-demand price under the pricing model's terms, or on-prem (purchase + host) / (amortisation years x 8,760 h)", "USD per GPU-hour", PRICE),
    ColumnDoc("electricity_usd_per_gpu_hour", "on-prem electricity per GPU-hour = (power_w_per_gpu + host power per GPU) / 1000 x PUE x USD/kWh (0 for rentals: the rental includes power)", "USD per GPU-hour", "--electricity-usd-per-kwh, --pue (defaults: aiinframap.com TCO tool, mid-2026)"),
    ColumnDoc("cost_usd_per_year", "cost of the configuration for a year of 8,760 hours = cost_usd_per_hour x 8,760", "USD/year", COST),
    ColumnDoc("upfront_usd", "paid at the start: the upfront share of a reserved commitment over its term, or the on-prem purchase of GPUs and hosts (already spread over the hourly figures)", "USD", COST),
    ColumnDoc("breakeven_usd_per_mtok_input", "price per 1M input (prompt) tokens that, with output tokens at output_input_price_ratio times it, recovers cost_usd_per_hour from what the point served (the split API price sheets quote)", "USD per 1M input tokens", COST),
    ColumnDoc("breakeven_usd_per_mtok_output", "price per 1M output tokens of that split = breakeven_usd_per_mtok_input x output_input_price_ratio (catalog pricing term, default 4)", "USD per 1M output tokens", COST),
    ColumnDoc("price_source", "where the GPU rate comes from (catalog citation or user override)", "text", "costmodel/data/hardware.json sources / command line"),
    ColumnDoc("power_source", "where the GPU's active power comes from (catalog board power or measured telemetry)", "text", "costmodel/data/hardware.json sources / --telemetry run"),
    ColumnDoc("cheapest_at_qps", "true for the cheapest SLO-meeting (hardware, mode) at this QPS, and for every option tied with it (monthly cost within 1%: a tie, never broken by USD per 1M output tokens)", "boolean", PLAN),
    ColumnDoc("slo", "the service-level objective checked (bounds on latency percentiles); 'stable' when only steady state is required", "text", "plan --slo / report --slo"),
    ColumnDoc("slo_failures", "why the point (or, for a plan row, the largest replica count tried) misses the SLO; empty when it meets it", "text", PLAN),
    ColumnDoc("flag", "why a row does not meet the SLO: UNSTABLE (not steady state: its latencies and per-token costs are left blank in the finance view) or the SLO bound it misses; empty when it meets the SLO", "text", "costmodel report (reports/finance.py)"),
    ColumnDoc("precision", "weight precision of the GPU's profile (e.g. bf16, fp8, int4)", "-", "the profile (costmodel/schemas/profile.py)"),
    ColumnDoc("rests_on", "what the row's figures rest on: the basis (measured / projected (from where) / roofline-only / prior) of each input of its GPU's "
                          "profile for its mode", "text", "costmodel/schemas/provenance.py rests_on, from the profile provenance"),
    ColumnDoc("replicas_min", "fewest SLO-meeting replicas, the smallest over the seeds of plan --seeds", "count", SENS),
    ColumnDoc("replicas_median", "fewest SLO-meeting replicas, the median over the seeds", "count", SENS),
    ColumnDoc("replicas_max", "fewest SLO-meeting replicas, the largest over the seeds", "count", SENS),
    ColumnDoc("seeds", "plans run, one per seed", "count", SENS),
    ColumnDoc("winners", "the cheapest SLO-meeting (GPU / mode x GPUs) at this QPS per seed, with how many seeds chose it", "text", SENS),
    ColumnDoc("cost_usd_per_month_mean", "the winner's monthly cost, mean over the seeds", "USD/month", SENS),
    ColumnDoc("cost_usd_per_month_ci95_low", "lower end of the 95% confidence interval of that mean (Student's t over the seeds)", "USD/month", SENS),
    ColumnDoc("cost_usd_per_month_ci95_high", "upper end of that interval", "USD/month", SENS),
    ColumnDoc("cost_usd_per_month_min", "the winner's monthly cost, smallest over the seeds", "USD/month", SENS),
    ColumnDoc("cost_usd_per_month_max", "the winner's monthly cost, largest over the seeds", "USD/month", SENS),
    ColumnDoc("input", "the input moved (the others as planned)", "text", SENS),
    ColumnDoc("low_value", "the input at the low end of its range (a value, or a factor on the planned value)", "text", "the row's range_source column"),
    ColumnDoc("high_value", "the input at the high end of its range", "text", "the row's range_source column"),
    ColumnDoc("range_source", "where the range comes from (catalog source, profile fit error, or a stated assumption (A))", "text", SENS),
    ColumnDoc("low_usd_per_month", "the cheapest SLO-meeting fleet's monthly cost summed over the planned loads, input at its low end", "USD/month", SENS),
    ColumnDoc("high_usd_per_month", "the same, input at its high end", "USD/month", SENS),
    ColumnDoc("low_winner", "the cheapest SLO-meeting (GPU / mode) per load, input at its low end", "text", SENS),
    ColumnDoc("high_winner", "the same, input at its high end", "text", SENS),
    ColumnDoc("flips_at", "the loads where the winner differs from the plan's, and what it becomes; empty: the decision holds", "text", SENS),
    ColumnDoc("low_crossover_qps", "the crossover's estimate re-bisected with the input at its low end (empty: not bracketed, or not searched: "
              "price rows re-price the plan's points; the verdict tells them apart)", "QPS", SENS),
    ColumnDoc("high_crossover_qps", "the same, input at its high end", "QPS", SENS),
    ColumnDoc("evaluations", "simulated points the replica search evaluated for this (hardware, mode, QPS)", "count", "simulate/plan/search.py"),
    ColumnDoc("slo_verdict", "the point's SLO verdict over its replications: pass (every figure's 95% interval below its bound, every replication "
                             "stable or their mean backlog growth below its limit), fail (an interval above its bound, or every replication unstable), "
                             "borderline (neither, at the replication cap: never a clean pass or fail)", "text", VERDICT),
    ColumnDoc("slo_meets_on_mean", "the figures' means over the replications meet every bound and most replications were stable (the point "
                                   "estimate's reading, used for the crossover's estimate)", "boolean", VERDICT),
    ColumnDoc("replications", "independent replications simulated for the point (replication i of plan --seed s: the simulator's seed 1000 s + i, "
                              "the same arrivals and lengths for every option at that load); 0: pinned, not simulated (slo_pinned)", "count", SETTLE),
    ColumnDoc("stable_replications", "replications whose queue stayed bounded", "count", SETTLE),
    ColumnDoc("stopped_replications", "replications the simulator stopped early, each missing a latency bound for certain (counted at the bound "
                                      "in that figure's interval)", "count", SETTLE),
    ColumnDoc("aborted_replications", "replications stopped with more than a minute of arrivals waiting (arrivals outpace service)", "count", SETTLE),
    ColumnDoc("simulated_window_s", "arrival seconds simulated over all the point's replications (replications x duration_s)", "s", SETTLE),
    ColumnDoc("backlog_growth_ratio", "backlog growth over the steady window as a share of the simulator's stability limit, mean over the "
                                      "replications (above 1: unstable)", "ratio", SETTLE),
    ColumnDoc("backlog_growth_ratio_ci95_low", "lower end of the 95% t-interval of backlog_growth_ratio's mean over the replications", "ratio", SETTLE),
    ColumnDoc("backlog_growth_ratio_ci95_high", "upper end of that interval (unbounded where a replication was unstable for another reason)", "ratio", SETTLE),
    ColumnDoc("slo_pinned", "a crossover-search count not simulated, and why: it settled the same at the QPS below and above, or to pass at a higher QPS", "text", SETTLE),
    ColumnDoc("slo_pinned_for", "the SLO a pinned cell's verdict holds for", "text", SETTLE),
    ColumnDoc("replicas_low", "the fewest replicas not settled to miss the SLO: below `replicas` where those counts are borderline (the low end "
                              "of the fleet's interval)", "count", PLAN),
    ColumnDoc("cost_usd_per_month_low", "the monthly cost at replicas_low: the low end of the cost's 95% interval (cost_usd_per_month is its "
                                        "high end, the settled fleet)", "USD/month", PLAN),
    ColumnDoc("borderline", "the counts below the settled one whose verdict is borderline, each with the figure and its interval", "text", PLAN),
    *[ColumnDoc(f"{m}_ms_{st}_ci95_{end}", f"{'lower' if end == 'low' else 'upper'} end of the 95% t-interval of {m}_ms_{st}'s mean over the "
                f"point's replications (when it is an SLO figure; unbounded above where a replication stopped early, missing it for certain)",
                "ms", SETTLE) for m in ("ttft", "e2e", "tpot", "queue") for st in ("p50", "p90", "p95", "p99", "mean") for end in ("low", "high")],
)

ANSWER = "the answer plan prints (costmodel/costing/answer.py; crossover: costmodel/costing/crossover.py)"
# answer.csv: plan's answer, one row per load and one per crossover, in the words every output prints
ANSWER_DOCS = {d.column: d for d in (
    ColumnDoc("question", "what the row answers: the cheapest SLO-meeting fleet at a load, or the crossover (over all GPUs or on one)", "text", ANSWER),
    ColumnDoc("answer", "the answer in words, as plan's console, the HTML answer box and the workbook print it", "text", ANSWER),
    ColumnDoc("tie", "a load's row: true when several options cost the same within 1% or their cost intervals overlap (all named in fleet "
                     "and tied_with; none wins); a crossover row: true when below the crossover DiffusionGemma only ties (is never cheaper)", "boolean", ANSWER),
    ColumnDoc("tied_with", "the options tied with the first one named in fleet, joined by ' | ' (empty: one winner); a crossover row: the options "
                           "tied at its bracket's lower end", "text", ANSWER),
    ColumnDoc("cost_usd_per_month_ci95_low", "the low end of the winner's monthly cost interval: its cost at the fewest replicas not settled to "
                                             "miss (borderline counts below the settled one); equal to cost_usd_per_month when settled", "USD/month", ANSWER),
    ColumnDoc("borderline", "the winner's replica counts below its settled one whose SLO verdict is borderline, with each figure's interval", "text", ANSWER),
    ColumnDoc("heldout_error", "the engine model's held-out error on the SLO's figure for the winning GPUs' profiles (signed predicted / "
                               "measured - 1), or 'not measured for this profile'", "text", "the profile's heldout_error (costmodel/schemas/profile.py)"),
    ColumnDoc("fleet", "the cheapest SLO-meeting fleet (GPUs x GPU (precision), mode), or every fleet of a tie joined by =", "text", ANSWER),
    ColumnDoc("runner_up", "the cheapest option that costs more than the winner (or the tie)", "text", ANSWER),
    ColumnDoc("runner_up_more_usd_per_month", "how much more the runner-up costs per month", "USD/month", ANSWER),
    ColumnDoc("rests_on", "what the answer rests on, from the profile provenance of its GPU and mode: measured, projected (from which measured GPU or "
                          "precision), roofline-only or prior (published) inputs: pass timings, MTP acceptance, commit statistics, the engine step term; "
                          "anything not measured on the winning GPU is named here", "text", ANSWER),
    ColumnDoc("crossover_status", "bracketed (found between two QPS), below-range, above-range (not within the evaluated loads), diffusion-never-meets", "text", ANSWER),
    ColumnDoc("crossover_qps", "the QPS above which DiffusionGemma costs more than the cheapest AR/MTP option: the midpoint of the bracket where "
                               "the figures' means flip the verdict (the point estimate)", "requests/s", ANSWER),
    ColumnDoc("crossover_qps_low", "the bracket's lower end: the highest evaluated QPS where DiffusionGemma is cheaper or tied (intervals overlapping included)", "requests/s", ANSWER),
    ColumnDoc("crossover_qps_high", "the bracket's upper end: the lowest evaluated QPS above it where DiffusionGemma costs more in every verdict's interval", "requests/s", ANSWER),
    ColumnDoc("crossover_qps_ci95_low", "the crossover's 95% interval, lower end: the last evaluated QPS up to which every verdict is settled "
                                        "(DiffusionGemma cheaper or an exact tie); with plan --seeds, widened to every seed's estimate", "requests/s", ANSWER),
    ColumnDoc("crossover_qps_ci95_high", "the same interval's upper end: the first evaluated QPS where DiffusionGemma certainly costs more", "requests/s", ANSWER),
)}


@dataclass
class PlanDoc:
    """plan.json as read back (the fields `report` uses; the rest stays in `raw`)."""

    path: Path
    points: "pd.DataFrame"  # flat PointSummary rows of every simulation the searches ran
    hardware_specs: dict[str, dict]
    slo: str
    pricing: dict  # costmodel.costing.PricingConfig.to_dict()
    qps: list[float]
    profiles: dict[str, dict] = field(default_factory=dict)  # hardware -> profile provenance
    cell_notes: dict = field(default_factory=dict)  # (hardware, mode, qps) -> note
    settings: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)


def write_plan_json(path: str | Path, doc: dict) -> Path:
    from costmodel import atomic  # the writer, where a plan is written: the pricing options (HOURS_PER_MONTH) load without it

    return atomic.write_text(path, json.dumps(jsonable({"kind": PLAN_KIND, "schema_version": PLAN_SCHEMA_VERSION, **doc}), indent=1) + "\n")


def is_plan_dir(p: Path) -> bool:
    return (p / PLAN_JSON).exists()


def read_plan(p: str | Path) -> PlanDoc:
    """A plan.json file (its directory's output manifest checked first: costmodel/outputset.py)."""
    import pandas as pd  # the table library, where the plan's table is read (issue 40: a command imports what it runs)

    from costmodel import outputset

    p = Path(p)
    doc = outputset.read_set(p.parent, lambda root: read_json(root / p.name, "plan"), "re-run `costmodel plan`")
    if not isinstance(doc, dict) or doc.get("kind") != PLAN_KIND:
        raise UserError(f"{p} is not a costmodel plan", "pass the -o directory of `costmodel plan`")
    if doc.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise UserError(f"plan {p} has schema_version {doc.get('schema_version')!r}; this costmodel reads {PLAN_SCHEMA_VERSION}", "re-run `costmodel plan`")
    try:
        notes = {(n["hardware"], n["mode"], float(n["qps"])): n["note"] for n in doc.get("cell_notes", [])}
        return PlanDoc(p, pd.DataFrame(doc["points"]), dict(doc["hardware_specs"]), doc["slo"], dict(doc["pricing"]),
                       [float(q) for q in doc["settings"]["qps"]], profiles=doc.get("profiles", {}), cell_notes=notes,
                       settings=doc["settings"], raw=doc)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"plan {p} is incomplete or malformed ({e.__class__.__name__}: {e})", "re-run `costmodel plan`") from None
