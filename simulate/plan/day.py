"""`costmodel plan --load-curve`: a fleet over a day, autoscaled and statically provisioned for the
peak, per GPU and mode; each hour's fleet, SLO attainment, GPU-hours, energy and dollars, and the
month of each.

    out = run_day(DayConfig(load="diurnal:peak=30,trough=10,peak_hour=14", hardware=["h100-sxm"], modes=["mtp"]))
    out.bills       # one MonthBill per (GPU, mode, fleet policy)
    write_day(out, "out/day")

How: (1) the peak: plan's replica search (simulate.plan.planner) finds the fewest replicas meeting
the SLO at the curve's peak rate; that is the static fleet (with a headroom term `max_utilisation<=U` in the SLO, grown until its
utilisation at the peak is at most U), and its load per replica (peak QPS /
replicas) becomes the autoscaled fleet's request-rate target: each replica is kept at most as
loaded as the peak fleet's were (below their capacity by the peak fleet's rounding up). (2) the day: both fleets serve the same day of
requests in the cluster simulator (simulate.cluster), continuously.

Intervals: the peak search settles each count's verdict over replications (simulate/plan/settle.py);
where the counts below the settled one are borderline (CellSearch.replicas_low < replicas), both
policies' days are simulated again from replicas_low, the low end of each bill's 95% cost interval
(only those fleets: a settled peak costs one day per policy). Each hour's verdict rests on batch
means of its requests (simulate/cluster/outcome.py): pass, fail or borderline; the answer
(costmodel/costing/day_answer.py) names a borderline winner and a tie where intervals overlap.

Time compression (`compress`, C): the curve's time axis and the autoscaler's clocks (scrape
interval, scale-down window, provisioning delay) run C times faster, requests at their real speed;
GPU-hours and energy are scaled back by C. The load then changes C times faster relative to a
request's latency (seconds against hours: negligible for C up to about 6) and the run costs 1/C.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from costmodel import atomic, outputset
from costmodel.errors import UserError
from costmodel.fields import DAY_REQUESTS
from costmodel.schemas.day import DAY_COMMAND, DAY_JSON, MonthBill, bill_order, day_docs, over_a_day
from costmodel.schemas.dictionary import write_table
from costmodel.schemas.profile import Profile
from costmodel.schemas.provenance import profile_provenance
from costmodel.shipped import resolve_profile, shipped_hardware
from simulate.api import resolve_workload
from simulate.cluster.autoscalers import make_autoscaler
from simulate.cluster.fleet import simulate_fleet
from simulate.cluster.fleetfile import load_fleet
from simulate.cluster.load import PRESETS, LoadCurve, curve_requests, parse_curve
from simulate.cluster.traces import FORMAT_NAMES, load_trace, trace_requests
from costmodel.costing.verdict import BORDERLINE, ci_columns
from simulate.cluster.outcome import UTIL_CI, RequestBound, interval_rows, summarise_span, util_sample_s
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import DEFAULT_COMPRESS, Scaling
from simulate.parallel import Workers, run_tasks
from simulate.plan import planner
from simulate.plan.api import carried_modes, plan_provenance
from costmodel.costing import GpuPrice, PricingConfig, get_model, gpu_price
from costmodel.costing.day import price_bill, price_hours
from costmodel.costing.day_answer import answer_column
from costmodel.slo import parse_slo
from simulate.plan.day_bounds import cost_floor, floor_replicas, not_simulated, prunable, prune_limit
from simulate.plan.day_hours import SETTLE_FIRST_S, SPAN_CAP_REQUESTS, check_hours, compressed, compressed_scaling, fleet_days, hour_job, hour_windows, hour_workers
from simulate.workload import build_requests, check_run_size, fits_budget

DAY_SIZE_KNOBS = "a lower peak or --load-scale, fewer hours, fewer --hardware or --mode, or a higher --compress"

UTIL_TERM = "max_utilisation"
POLICIES = ("autoscaled", "static")


@dataclass
class DayConfig:
    load: str  # a curve (CSV of time_s,qps, flat:..., diurnal:...) or a public trace file (simulate/cluster/traces.py)
    slo: str = "p95_ttft_ms<=1000,p95_e2e_ms<=5000"
    hardware: list[str] = field(default_factory=lambda: list(shipped_hardware()))  # every GPU a profile ships for
    modes: list[str] | None = None  # None: the modes every planned GPU's profile carries (plan.api.carried_modes)
    workload: str | None = None
    seed: int = 0
    compress: float = DEFAULT_COMPRESS
    interval_s: float = 3600.0
    duration_s: float = 60.0  # simulated seconds per probe of the peak search
    max_replicas: int = 64
    max_requests: int = int(DAY_REQUESTS.hi)  # the requests the day simulates over all its fleets (check_size), and a trace's rows
    scaling: Scaling = field(default_factory=Scaling)
    jobs: int | None = None
    load_scale: float = 1.0  # a curve's rates, or a trace's request rate (thinned or replicated), times this
    autoscale_headroom: float = 1.0  # the autoscaled fleet keeps each replica at most this share of the peak fleet's load per replica
    profiles: list[str] = field(default_factory=list)  # profile JSONs replacing the shipped default of their GPU (plan --profile)
    pricing: PricingConfig = field(default_factory=PricingConfig)  # how the bills are priced (costmodel/costing/day.py)
    prefix_caching: bool | None = None  # vLLM's prefix caching, for the peak search and the day alike (None: its default, on)
    scheduler: str | None = None  # a Dask scheduler the fleets (and a large day's hours) run on (None: this machine)
    profile_paths: dict = field(default_factory=dict)  # hardware -> profile path (None: shipped); filled by run_day
    every_fleet: bool = False  # simulate every fleet, none listed as not simulated for its cost floor (day_bounds.py): for a workbook's price what-ifs
    hour_spans: bool = True  # a day run hour by hour simulates each hour's busiest span until its verdict settles (day_hours.py); False: every whole hour

    def engine(self) -> dict | None:
        """The engine settings given for every replica: the plan's points' (PlanSettings.engine) and
        the day's pools' (PoolSpec.engine) are this one value, so both run the same engine."""
        return None if self.prefix_caching is None else {"enable_prefix_caching": self.prefix_caching}

    def profile(self, hardware: str) -> Profile:
        return planner.process_profile(self.profile_paths.get(hardware), hardware)


@dataclass(frozen=True)
class DayLoad:
    """The day's load: a rate curve, or a trace replayed with its own times and lengths."""

    source: str
    span_s: float
    peak_qps: float  # a curve's peak; a trace's busiest hour
    first_qps: float  # the rate the day starts at (the autoscaled fleet's first size)
    expected_requests: float
    curve: LoadCurve | None = None
    trace: str | None = None

    def requests(self, profile, cfg: "DayConfig", c: float):
        """The (time-compressed) day's requests: drawn once per process for every fleet whose
        profile draws the same lengths (common random numbers: every fleet serves the same requests)."""
        key = (self.source, self.trace, cfg.workload, cfg.seed, c, cfg.load_scale, cfg.max_requests, _lengths_key(profile))
        reqs = _SHARED_REQUESTS.get(key)
        if reqs is None:
            if len(_SHARED_REQUESTS) >= SHARED_DAYS_KEPT:  # a long-lived Dask worker keeps no day for ever
                _SHARED_REQUESTS.clear()
            reqs = _SHARED_REQUESTS[key] = self._draw(profile, cfg, c)
        return reqs

    def _draw(self, profile, cfg: "DayConfig", c: float):
        if self.curve is not None:
            return curve_requests(profile, resolve_workload(cfg.workload), compressed(self.curve, c), cfg.seed)
        # a trace's times divided by c, thinned to 1/c of its requests: the same rates in a shorter day
        return trace_requests(profile, load_trace(self.trace, compress=c, rate_scale=cfg.load_scale / c, seed=cfg.seed, max_rows=cfg.max_requests), cfg.seed)


# the day's requests per (load, workload, seed, compression, lengths): forked workers inherit them
_SHARED_REQUESTS: dict = {}
SHARED_DAYS_KEPT = 4


def _lengths_key(profile: Profile) -> tuple:
    """What of a profile the requests depend on: its regimes' output lengths (workload.py _outputs)."""
    return tuple((name, tuple(cs.content_length.values), tuple(cs.content_length.probs)) for name, cs in sorted(profile.regimes.items()))


def _is_curve_file(text: str) -> bool:
    p = Path(text)
    if not p.is_file() or p.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return not p.is_file()
    head = p.open(encoding="utf-8-sig", errors="replace").readline()  # a BOM is the encoding's, not the first column's
    return {"time_s", "qps"} <= {c.strip() for c in head.split(",")}


def load_day(text: str, scale: float, seed: int, max_rows: int | None = None) -> DayLoad:
    """--load-curve: a preset or a time_s,qps CSV (a curve), else a trace in a format read (at most
    `max_rows` rows of it)."""
    if not (math.isfinite(scale) and scale > 0):
        raise UserError(f"--load-scale {scale!r} must be a positive number", "e.g. 1 (as given) or 2")
    if _is_curve_file(text):
        lc = parse_curve(text)
        lc = lc.scaled(scale) if scale != 1 else lc
        return DayLoad(lc.source, lc.span_s, lc.peak_qps, lc.qps[0], lc.expected_requests, curve=lc)
    try:
        tr = load_trace(text, rate_scale=scale, seed=seed, max_rows=max_rows)
    except UserError as e:
        if "no format read" not in e.what:
            raise
        raise UserError(e.what, f"give a rate curve (CSV time_s,qps; {PRESETS}) or a trace: {FORMAT_NAMES}") from None
    hours = np.bincount((tr.arrival_s // 3600).astype(np.int64))
    widths = np.minimum(3600.0, tr.span_s - 3600.0 * np.arange(len(hours)))
    rates = hours / np.maximum(widths, 1.0)
    full = rates[widths >= 3600] if (widths >= 3600).any() else rates
    return DayLoad(tr.describe, tr.span_s, float(full.max()), float(rates[0]), float(len(tr.arrival_s)), trace=str(text))


def _peak_workload(load: DayLoad, cfg: "DayConfig", folder: Path) -> str | None:
    """For a trace: its busiest hour as a workload file, so the peak search sees the trace's lengths."""
    if load.trace is None:
        return cfg.workload
    tr = load_trace(load.trace, rate_scale=cfg.load_scale, seed=cfg.seed, max_rows=cfg.max_requests)
    hour = int(np.argmax(np.bincount((tr.arrival_s // 3600).astype(np.int64))))
    sel = (tr.arrival_s >= hour * 3600) & (tr.arrival_s < (hour + 1) * 3600)
    pd.DataFrame({"arrival_s": tr.arrival_s[sel] - hour * 3600, "prompt_tokens": tr.prompt_tokens[sel],
                  "output_tokens": tr.output_tokens[sel]}).to_csv(folder / "peak.csv", index=False)
    (folder / "peak.json").write_text(json.dumps({"trace": "peak.csv", "trace_time_scale": "qps"}))
    return str(folder / "peak.json")


@dataclass
class SloSplit:
    """The SLO's latency bounds (plan's Slo) and its headroom term, if any."""

    text: str  # the latency part, as costmodel.slo parses it
    bounds: list[RequestBound]
    max_utilisation: float | None


def split_slo(text: str) -> SloSplit:
    """"p95_ttft_ms<=1000,max_utilisation<=0.7" -> the latency bounds and the headroom term."""
    lat, util = [], None
    for clause in (text or "").split(","):
        name, op, value = clause.strip().partition("<=")
        if name.strip().lower() == UTIL_TERM:
            try:
                util = float(value)
            except ValueError:
                raise UserError(f"--slo clause {clause.strip()!r}: {value!r} is not a number", "e.g. max_utilisation<=0.7") from None
            if not 0 < util <= 1:
                raise UserError(f"--slo clause {clause.strip()!r}: utilisation is a share in (0, 1]", "e.g. max_utilisation<=0.7")
        else:
            lat.append(clause)
    lat_text = ",".join(lat)
    slo = parse_slo(lat_text)
    return SloSplit(lat_text, [RequestBound(b.stat, b.metric, b.limit_ms) for b in slo.bounds], util)


@dataclass
class DayOutcome:
    config: DayConfig
    curve: DayLoad
    slo: SloSplit
    peak_replicas: dict  # (hardware, mode) -> replicas at the peak (None: none <= max_replicas)
    hours: pd.DataFrame  # IntervalRow columns + policy, per hour of the (uncompressed) day
    bills: list[MonthBill]  # those meeting the SLO every hour first, each group cheapest first (schemas/day.py bill_order)
    wall_s: float
    profiles: dict = field(default_factory=dict)  # hardware -> Profile the fleets ran on
    prices: dict = field(default_factory=dict)  # hardware -> GpuPrice the bills are priced at
    peak_replicas_low: dict = field(default_factory=dict)  # (hardware, mode) -> the fewest replicas at the peak not settled to miss


def _check(cfg: DayConfig) -> None:
    if not (isinstance(cfg.compress, (int, float)) and math.isfinite(cfg.compress) and 1 <= cfg.compress <= 24):
        raise UserError(f"--compress {cfg.compress!r} must be in [1, 24]", "1 simulates the day in real time; 4 (the default) in a quarter")
    if not 0 < cfg.autoscale_headroom <= 1:
        raise UserError(f"--autoscale-headroom {cfg.autoscale_headroom!r} must be in (0, 1]", "e.g. 0.85: each replica at most 85% of the peak fleet's load")
    if not cfg.interval_s > 0:
        raise UserError(f"interval {cfg.interval_s!r} s must be positive", "e.g. 3600")
    cfg.scaling.check("--load-curve fleet")


def check_size(cfg: DayConfig, lc: DayLoad, fleets: int, can_stream: bool = False) -> bool:
    """The day's run size before any request is drawn: its requests (1/compress of the real day's; at
    most SPAN_CAP_REQUESTS an hour where its hours run on spans) on each of `fleets` fleets within
    --max-requests, and one fleet's within the memory budget; True
    when it is not, and the day (`can_stream`: a curve) runs hour by hour instead (day_hours.py),
    within the budget if its busiest hour is."""
    per_fleet = lc.expected_requests / cfg.compress
    stream = can_stream and lc.curve is not None and not fits_budget(per_fleet, cfg.max_replicas)
    if stream and cfg.hour_spans:  # each hour simulated on a span until it settles: at most SPAN_CAP_REQUESTS of it
        per_fleet = min(per_fleet, len(hour_windows(lc.span_s, cfg.interval_s)) * SPAN_CAP_REQUESTS)
    total = per_fleet * fleets
    if total > cfg.max_requests:
        over = "" if cfg.max_requests != DAY_REQUESTS.hi else f" ({DAY_REQUESTS.why})"
        raise UserError(f"the day ({lc.source}) would simulate about {total:,.0f} requests ({per_fleet:,.0f} on each of {fleets} fleets), "
                        f"above the bound of {cfg.max_requests:,}{over}",
                        "plan fewer hours or a lower rate, fewer --hardware or --mode, or a higher --compress"
                        + (f"; or pass {DAY_REQUESTS.override} to run it" if cfg.max_requests == DAY_REQUESTS.hi else "; or a larger --max-requests"))
    if stream:
        check_hours(cfg, lc, fleets)
        return True
    check_run_size(per_fleet, cfg.max_replicas, "each fleet of the day", knobs=DAY_SIZE_KNOBS, repeat=False)
    return False


def _check_workload(cfg: DayConfig, lc: DayLoad) -> None:
    if not cfg.workload:
        return
    if lc.trace is not None:
        raise UserError("--workload sets lengths, but a trace brings its own", "drop --workload with a trace")
    wl = resolve_workload(cfg.workload)
    if wl.trace is not None:
        raise UserError(f"workload {cfg.workload} replays a trace, but --load-curve sets the arrivals",
                        "give the trace itself as --load-curve TRACE (its own times and lengths)")
    if wl.prefix is not None and wl.prefix.turns > 1:
        raise UserError(f"workload {cfg.workload} has multi-turn sessions, whose think times a load curve would stretch with its rate",
                        "plan sessions with --qps, or give a workload of single requests (a shared system prompt is fine)")


PEAK_LADDER_SHARE = 0.1  # a large day's peak search sizes this share of the peak first (its probes a tenth as costly)


def _peak_search(cfg: DayConfig, lc: DayLoad, slo: SloSplit, workload: str | None, say, large: bool = False) -> dict:
    """(hardware, mode) -> (replicas at the peak or None, requests/s per replica there, the fewest
    replicas not settled to miss there: below the first where those counts are borderline). A `large`
    day's chain first searches PEAK_LADDER_SHARE of the peak: its answer is a lower bound at the peak
    (more load never needs fewer replicas), and the per-replica load that missed there guesses the
    peak's count (planner._Loads.guess), so the peak's search starts next to its answer."""
    qps = [lc.peak_qps * PEAK_LADDER_SHARE, lc.peak_qps] if large else [lc.peak_qps]
    settings = planner.PlanSettings(qps, slo.text, cfg.hardware, cfg.modes, {h: cfg.profile_paths.get(h) for h in cfg.hardware},
                                    cfg.duration_s, cfg.seed, cfg.max_replicas, cfg.jobs or planner.default_jobs(), workload, engine=cfg.engine())
    out = {}
    for c in planner.run_searches(settings, progress=say, scheduler=cfg.scheduler):
        if c.qps != lc.peak_qps:
            continue
        low = c.replicas_low if c.replicas and c.replicas_low and c.replicas_low < c.replicas else c.replicas
        out[(c.hardware, c.mode)] = (c.replicas, lc.peak_qps / c.replicas if c.replicas else None, low)
    return out


HEADROOM_PROBE_S = 300.0  # simulated seconds at the peak rate per utilisation probe
HEADROOM_TRIES = 4


def _utilisation_at(cfg: DayConfig, hardware: str, mode: str, replicas: int, qps: float, workload: str | None) -> float:
    """The step-capacity utilisation (simulate/cluster/pool.py) of `replicas` serving `qps`."""
    profile = cfg.profile(hardware)
    reqs = build_requests(profile, resolve_workload(workload), qps, duration_s=HEADROOM_PROBE_S, seed=cfg.seed)
    pool = PoolSpec("probe", profile, mode, engine=cfg.engine(),
                    scaling=Scaling(min_replicas=replicas, max_replicas=replicas, initial_replicas=replicas))
    run = simulate_fleet([pool], reqs, seed=cfg.seed, drain_s=0.0, sample_s=HEADROOM_PROBE_S)
    return interval_rows(run, [], reqs.window_s, reqs.window_s)[0].utilisation


def _headroom(cfg: DayConfig, lc: DayLoad, peaks: dict, limit: float, workload: str | None, say) -> dict:
    """With `max_utilisation<=U` in the SLO: the peak fleet grows until its utilisation at the peak
    is at most U (utilisation falls about as 1/replicas, so each try scales by utilisation / U)."""
    out = {}
    for (h, m), (n, _, low) in peaks.items():
        if n is None:
            out[(h, m)] = (n, None, None)
            continue
        n0, u = n, _utilisation_at(cfg, h, m, n, lc.peak_qps, workload)
        for _ in range(HEADROOM_TRIES):
            if u <= limit or n >= cfg.max_replicas:
                break
            n = min(cfg.max_replicas, max(n + 1, math.ceil(n * u / limit)))
            u = _utilisation_at(cfg, h, m, n, lc.peak_qps, workload)
        if n != n0:
            say(f"{h}/{m}: {n} replicas for utilisation {u:.2f} <= {limit:g} at the peak ({n0} met the latency bounds)")
        out[(h, m)] = (n, lc.peak_qps / n, low if n == n0 else n)  # grown for headroom: the utilisation probe sets the count, no interval
    return out


def _day_job(hardware: str, mode: str, policy: str, n_peak: int, target: float | None, cfg: DayConfig, lc: DayLoad, slo: SloSplit) -> dict:
    """One fleet over the (compressed) day, in a worker: its interval rows and span summary."""
    t0 = time.perf_counter()
    profile = cfg.profile(hardware)
    c = float(cfg.compress)
    reqs = lc.requests(profile, cfg, c)
    span_s = lc.span_s / c
    scaling = compressed_scaling(cfg.scaling, c)
    if policy == "static":
        scaling = replace(scaling, min_replicas=n_peak, max_replicas=n_peak, initial_replicas=n_peak)
        auto = make_autoscaler("static", replicas=n_peak)
    else:
        first = max(scaling.min_replicas, min(n_peak, math.ceil(n_peak * lc.first_qps / lc.peak_qps)))
        scaling = replace(scaling, initial_replicas=first, max_replicas=max(scaling.max_replicas, n_peak))
        target *= cfg.autoscale_headroom
        auto = make_autoscaler("request-rate", target=target)
    pool = PoolSpec(f"{hardware}/{mode}", profile, mode, autoscaler=auto, scaling=scaling, engine=cfg.engine())  # the plan's engine
    run = simulate_fleet([pool], reqs, seed=cfg.seed, sample_s=_sample_s(min(cfg.interval_s, lc.span_s) / c, slo))
    rows = interval_rows(run, slo.bounds, span_s, cfg.interval_s / c, max_utilisation=slo.max_utilisation)
    summ = summarise_span(rows, span_s)[0]
    name = "static" if policy == "static" else f"request-rate:target={target:.3g}"
    bill = over_a_day(_bill(summ, rows, policy, name, c, interval_s=cfg.interval_s), lc.span_s / 3600)
    flat = _flat(rows, policy, c, cfg.interval_s)
    return {"rows": flat, "bill": bill, "wall_s": time.perf_counter() - t0, "requests": len(reqs)}


def _sample_s(interval_s: float, slo: SloSplit) -> float:
    """The fleet's counter sampling: each interval's edges, and with a headroom term BATCHES per
    interval, for its utilisation's batch means (simulate/cluster/outcome.py)."""
    return interval_s if slo.max_utilisation is None else util_sample_s(interval_s)


COUNTS = ("requests_arrived", "requests_rejected", "requests_timed_out", "requests_unfinished")


def _flat(rows: list, policy: str, c: float, interval_s: float) -> list[dict]:
    """Interval rows of a compressed day as rows of the real day (hours, request counts, GPU-hours,
    energy, dollars: a compressed day holds 1/c of the real day's requests at the same rates)."""
    out = []
    for r in rows:
        d = r.flat()
        d.update(policy=policy, hour=r.interval * interval_s / 3600, start_s=r.start_s * c, end_s=r.end_s * c, simulated_s=(r.end_s - r.start_s) * c,
                 gpu_hours=r.gpu_hours * c, energy_kwh=r.energy_kwh * c, cost_usd=r.cost_usd * c, **{k: round(d[k] * c) for k in COUNTS})
        out.append(d)
    return out


def _bill(summ, rows: list, policy: str, name: str, c: float, interval_s: float = 3600.0) -> MonthBill:
    mine = [r for r in rows if r.pool == summ.pool]
    return MonthBill(summ.hardware, summ.mode, policy, name, int(min(r.replicas_max for r in mine)), summ.replicas_max,
                     round(summ.requests_arrived * c), round(summ.requests_rejected * c), summ.slo_attainment, summ.intervals_meeting_slo, summ.intervals, summ.gpu_hours * c,
                     summ.energy_kwh * c, summ.cost_usd * c, summ.cost_usd_per_month, summ.energy_kwh_per_month,
                     hours_borderline=summ.intervals_borderline, hours_failing=summ.intervals_failing, borderline=borderline_hours(mine, interval_s))


def borderline_hours(rows: list, interval_s: float) -> str:
    """The borderline intervals by the hour they start (of the real day), and the first one's reason."""
    b = [r for r in rows if r.slo_verdict == BORDERLINE]
    if not b:
        return ""
    hours = ", ".join(f"{r.interval * interval_s / 3600:g}" for r in b[:6]) + (f" and {len(b) - 6} more" if len(b) > 6 else "")
    return f"{'hour' if len(b) == 1 else 'hours'} {hours}: {b[0].slo_borderline}"


def _resolve_profiles(cfg: DayConfig) -> dict[str, Profile]:
    """--profile files (each replacing its GPU's shipped default, its GPU added) and the shipped
    defaults: hardware -> Profile, checked before anything runs (as plan's _resolve)."""
    cfg.hardware = list(dict.fromkeys(cfg.hardware))
    for path in cfg.profiles:
        prof = resolve_profile(path, "")
        hid = prof.hardware.id
        if hid in cfg.profile_paths:
            raise UserError(f"two --profile files are for {hid}", "pass one profile per GPU")
        cfg.profile_paths[hid] = str(Path(path).resolve())
        if hid not in cfg.hardware:
            cfg.hardware.append(hid)
    return {h: cfg.profile(h) for h in cfg.hardware}


def _prices(cfg: DayConfig, profiles: dict[str, Profile]) -> dict[str, GpuPrice]:
    specs = {h: p.hardware_spec() for h, p in profiles.items()}
    pricing = cfg.pricing.validate()
    pricing.check_hardware(specs)
    return {h: gpu_price(s, pricing) for h, s in specs.items()}  # a GPU without a price under the model fails here, before any simulation


def run_fleet_day(cfg: DayConfig, fleet: str, progress: Callable[[str], None] | None = None) -> DayOutcome:
    """A fleet file's pools (simulate/cluster/fleetfile.py: mixed modes and GPUs, requests by class)
    over the day: one bill per pool and one for the fleet (each pool at its own price)."""
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    _check(cfg)
    slo = split_slo(cfg.slo)
    lc = load_day(cfg.load, cfg.load_scale, cfg.seed, cfg.max_requests)
    _check_workload(cfg, lc)
    check_size(cfg, lc, 1)  # one fleet of pools
    _resolve_profiles(cfg)
    profiles: dict = {}
    pools = load_fleet(fleet, lambda h: profiles.setdefault(h, cfg.profile(h)), cfg.scaling)
    c = float(cfg.compress)
    for p in pools:
        p.scaling = compressed_scaling(p.scaling, c)
        p.engine = cfg.engine()
    reqs = lc.requests(pools[0].profile, cfg, c)
    say(f"fleet {fleet}: {len(pools)} pools, {lc.source}, {len(reqs):,} requests simulated ({c:g}x time compression)")
    run = simulate_fleet(pools, reqs, seed=cfg.seed, sample_s=_sample_s(min(cfg.interval_s, lc.span_s) / c, slo))
    span_s = lc.span_s / c
    rows = interval_rows(run, slo.bounds, span_s, cfg.interval_s / c, max_utilisation=slo.max_utilisation)
    bills = [over_a_day(_bill(s, rows, s.pool, next((p.policy().name for p in pools if p.name == s.pool), "fleet"), c, interval_s=cfg.interval_s), lc.span_s / 3600)
             for s in summarise_span(rows, span_s)]
    hours = pd.DataFrame(_flat(rows, "fleet", c, cfg.interval_s))
    return DayOutcome(cfg, lc, slo, {}, hours, bills, time.perf_counter() - t0, profiles=profiles)


def run_day(cfg: DayConfig, progress: Callable[[str], None] | None = None) -> DayOutcome:
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    _check(cfg)
    profiles = _resolve_profiles(cfg)
    if cfg.modes is None:  # the modes every planned GPU's profile carries, as plan's
        cfg.modes = carried_modes([profiles[h] for h in cfg.hardware])
    for h, p in profiles.items():
        for m in cfg.modes:
            p.mode(m)
    prices = _prices(cfg, profiles)
    slo = split_slo(cfg.slo)
    lc = load_day(cfg.load, cfg.load_scale, cfg.seed, cfg.max_requests)
    _check_workload(cfg, lc)
    stream = check_size(cfg, lc, len(cfg.hardware) * len(cfg.modes) * len(POLICIES), can_stream=True)
    say(f"day: {lc.source}, {lc.expected_requests:,.0f} requests, peak {lc.peak_qps:.3g} QPS; sizing the peak fleet")
    with tempfile.TemporaryDirectory() as tmp:
        workload = _peak_workload(lc, cfg, Path(tmp))
        peaks = _peak_search(cfg, lc, slo, workload, say, large=stream)
        if slo.max_utilisation is not None:
            peaks = _headroom(cfg, lc, peaks, slo.max_utilisation, workload, say)
    jobs = [(h, m, pol, peaks[(h, m)][0], peaks[(h, m)][1], cfg, lc, slo) for h in cfg.hardware for m in cfg.modes for pol in POLICIES
            if peaks[(h, m)][0] is not None]
    lows = {i: (h, m, pol, low, lc.peak_qps / low, cfg, lc, slo) for i, (h, m, pol, n, *_) in enumerate(jobs) for low in [peaks[(h, m)][2]] if low < n}
    if lows:
        say(f"{len(lows)} fleet day(s) again from the fewest peak replicas not settled to miss (the low ends of their cost intervals), where simulated")
    if not stream:
        _draw_days(jobs, cfg, lc, profiles)
    results, low_results, skipped = _run_cheapest_first(jobs, lows, peaks, cfg, lc, profiles, prices, stream, say)
    bills = _with_savings([price_bill(r["bill"], prices[r["bill"].hardware]) for r in results], _static_costs(skipped, peaks, prices, lc, cfg))
    bills = _with_lows(bills, [price_bill(r["bill"], prices[r["bill"].hardware]) for r in low_results], peaks) + skipped
    for (h, m), (n, *_) in peaks.items():
        if n is None:
            bills.append(MonthBill(h, m, "static", "static", 0, 0, 0, 0, float("nan"), 0, 0, float("nan"), float("nan"), float("nan"),
                                   float("nan"), float("nan"), note=f"no fleet of <= {cfg.max_replicas} replicas meets the SLO at the peak"))
    hours = price_hours(pd.DataFrame([row for r in results for row in r["rows"]]), prices)
    return DayOutcome(cfg, lc, slo, {k: v[0] for k, v in peaks.items()}, hours, sorted(bills, key=bill_order), time.perf_counter() - t0,
                      profiles=profiles, prices=prices, peak_replicas_low={k: v[2] for k, v in peaks.items()})


def _with_lows(bills: list[MonthBill], lows: list[MonthBill], peaks: dict) -> list[MonthBill]:
    """Each bill with its peak fleet's replica interval and the low end of its cost interval (the
    same policy's day from the fewest peak replicas not settled to miss; itself where settled)."""
    low_of = {(b.hardware, b.mode, b.policy): b for b in lows}
    out = []
    for b in bills:
        n, _, n_low = peaks[(b.hardware, b.mode)]
        lo = low_of.get((b.hardware, b.mode, b.policy), b)
        why = (f"{n_low}-{n - 1} replicas at the peak are borderline (settled pass at {n})" if n_low < n else "")
        out.append(replace(b, replicas_peak=n, replicas_peak_low=n_low, cost_usd_per_month_low=min(lo.cost_usd_per_month, b.cost_usd_per_month),
                           replicas_max_low=lo.replicas_max, gpu_hours_per_day_low=lo.gpu_hours_per_day, energy_kwh_per_day_low=lo.energy_kwh_per_day,
                           borderline="; ".join(x for x in (b.borderline, why) if x)))
    return out


def _say_done(say):
    def done(i, res):
        b = res["bill"]
        say(f"{b.hardware}/{b.mode} {b.policy}: {res['requests']:,} requests in {res['wall_s']:.1f} s, ${b.cost_usd_per_month:,.0f}/month at catalog prices")
    return done


def _fleet_floor(job: tuple, peaks: dict, cfg: DayConfig, lc: DayLoad, price) -> float:
    """The floor of a fleet's monthly cost, its cost interval's low end included (day_bounds.py)."""
    h, m, pol = job[:3]
    n_low = peaks[(h, m)][2]
    if pol == "static":
        counts = floor_replicas(lc, None, cfg.scaling, cfg.interval_s, n_static=n_low)
    else:
        counts = floor_replicas(lc, lc.peak_qps / n_low * cfg.autoscale_headroom, cfg.scaling, cfg.interval_s)
    return cost_floor(lc, price, counts, cfg.interval_s)


def _run_cheapest_first(jobs: list, lows: dict, peaks: dict, cfg: DayConfig, lc: DayLoad, profiles: dict, prices: dict, stream: bool,
                        say) -> tuple[list, list, list]:
    """The fleets' days, cheapest floor first, a round at a time (as many fleets as workers; one with
    hour-by-hour days, which use every worker): a fleet whose floor is above what the answer can still
    use (day_bounds.prune_limit) is listed as not simulated, said here and in the month table.
    Returns the simulated fleets' results, their low ends' results, and the bills of those not simulated."""
    floors = [_fleet_floor(j, peaks, cfg, lc, prices[j[0]]) for j in jobs]
    pending = sorted(range(len(jobs)), key=lambda i: (floors[i], jobs[i][2] != "autoscaled"))
    done: dict[int, dict] = {}
    low_done: dict[int, dict] = {}
    skipped: list[MonthBill] = []
    per_round = len(jobs) if cfg.every_fleet else 1 if stream else max(1, cfg.jobs or planner.default_jobs())
    while pending:
        priced = _with_lows([price_bill(done[i]["bill"], prices[jobs[i][0]]) for i in done],
                            [price_bill(low_done[i]["bill"], prices[jobs[i][0]]) for i in low_done], peaks)
        for i in list(pending):
            h, m, pol = jobs[i][:3]
            limit = prune_limit(priced, h, m)
            if prunable(floors[i], limit) and not cfg.every_fleet:
                pending.remove(i)
                skipped.append(not_simulated(h, m, pol, floors[i], limit[1], cfg.pricing.model))
                say(f"{h}/{m} {pol}: {skipped[-1].note}")
        # a round: the cheapest floors, one fleet per (GPU, mode) first (its cost bounds its other policy)
        groups = [jobs[i][:2] for i in pending]
        batch = [i for k, i in enumerate(pending) if groups[k] not in groups[:k]][:per_round]
        batch += [i for i in pending if i not in batch][:per_round - len(batch)]
        for i in batch:
            pending.remove(i)
        if not batch:
            break
        todo = [jobs[i] for i in batch] + [lows[i] for i in batch if i in lows]
        res = _run_hours(todo, cfg, lc, say) if stream else _run_days(todo, cfg, lc, profiles, say)
        done.update(zip(batch, res[:len(batch)]))
        low_done.update(zip([i for i in batch if i in lows], res[len(batch):]))
    order = sorted(done)
    return [done[i] for i in order], [low_done[i] for i in order if i in low_done], skipped


def _static_costs(skipped: list[MonthBill], peaks: dict, prices: dict, lc: DayLoad, cfg: DayConfig) -> dict:
    """(hardware, mode) -> the monthly cost of a static fleet not simulated where its price makes it
    exact (its replicas all day; not an owned GPU, whose electricity depends on the simulated energy)."""
    out = {}
    for b in skipped:
        p = prices[b.hardware]
        if b.policy == "static" and not get_model(p.basis).owned:
            out[(b.hardware, b.mode)] = cost_floor(lc, p, floor_replicas(lc, None, cfg.scaling, cfg.interval_s, n_static=peaks[(b.hardware, b.mode)][0]),
                                                   cfg.interval_s, slack=0.0)
    return out


def _draw_days(jobs: list, cfg: DayConfig, lc: DayLoad, profiles: dict) -> None:
    """The day's requests, drawn here once for every GPU's lengths before any worker forks."""
    _SHARED_REQUESTS.clear()  # one day's requests held at a time
    for h in dict.fromkeys(j[0] for j in jobs):
        lc.requests(profiles[h], cfg, float(cfg.compress))


def _run_days(jobs: list, cfg: DayConfig, lc: DayLoad, profiles: dict, say) -> list[dict]:
    """Each fleet's continuous day, one job per fleet: on forked processes here (they inherit the
    day's requests, drawn once: _draw_days), or on the Dask scheduler given."""
    workers = min(len(jobs), cfg.jobs or planner.default_jobs())
    say(f"simulating {len(jobs)} days ({cfg.compress:g}x time compression) on {workers} {'Dask workers' if cfg.scheduler else 'processes'}")
    cluster = Workers(cfg.scheduler, cfg.jobs or planner.default_jobs(), local="processes")
    return run_tasks(_day_job, jobs, cluster=cluster, on_done=_say_done(say))


def _run_hours(jobs: list, cfg: DayConfig, lc: DayLoad, say) -> list[dict]:
    """A day too large to hold: every (fleet, hour) one job drawing only its hour's requests
    (simulate/plan/day_hours.py), on Dask (a local cluster, or the scheduler given)."""
    check_hours(cfg, lc, len(jobs))
    workers, cap_s = hour_workers(cfg, lc, cfg.jobs or planner.default_jobs())
    windows = hour_windows(lc.span_s, cfg.interval_s)
    hours = [(*j, k, t0, t1, cap_s) for j in jobs for k, (t0, t1) in enumerate(windows)]  # a fleet: (hardware, mode, policy, peak replicas)
    hours.sort(key=lambda h: -lc.curve.window(h[9], h[10]).expected_requests)  # busiest first: the workers finish together (rows are keyed, not ordered)
    cap = (f"the whole hour, at most {SPAN_CAP_REQUESTS:,} requests" + ("" if math.isinf(cap_s) else f" or {cap_s * cfg.compress:,.0f} s of the hour "
                                                                       f"(the memory budget's, over {workers} workers)"))
    say(f"the day holds {lc.expected_requests / cfg.compress:,.0f} requests per fleet, more than the memory budget: simulating {len(jobs)} fleets "
        f"hour by hour ({len(hours)} jobs, each drawing its own hour's busiest {SETTLE_FIRST_S * cfg.compress:g} s, longer while its verdict is "
        f"borderline, up to {cap}) on {'the Dask scheduler' if cfg.scheduler else f'{workers} Dask worker(s)'}")

    def done(i, res):
        h, m, pol = hours[i][:3]
        say(f"{h}/{m} {pol} hour {hours[i][8]}: {res['requests']:,} requests in {res['wall_s']:.1f} s "
            f"({res['simulated_s']:,.0f} s of the hour's arrivals judged, verdict {res['row'].slo_verdict})")

    results = run_tasks(hour_job, hours, cluster=Workers(cfg.scheduler, workers, local="dask"), on_done=done)
    days = fleet_days(results, [h[:4] for h in hours], [j[:4] for j in jobs], cfg, lc, lambda *a: over_a_day(_bill(*a, interval_s=cfg.interval_s), lc.span_s / 3600), _flat)
    for i, d in enumerate(days):
        _say_done(say)(i, d)
    return days


def _with_savings(bills: list[MonthBill], static_known: dict | None = None) -> list[MonthBill]:
    static = {**(static_known or {}), **{(b.hardware, b.mode): b.cost_usd_per_month for b in bills if b.policy == "static"}}
    for b in bills:
        s = static.get((b.hardware, b.mode))
        if s:
            b.saving_vs_static_frac = 1 - b.cost_usd_per_month / s
    return bills


HOUR_COLUMNS = ["pool", "hardware", "mode", "policy", "hour", "start_s", "end_s", "simulated_s", "offered_qps", "replicas_mean", "replicas_max", "utilisation", "slo_attainment", "meets_slo", "slo_verdict", "slo_borderline",
                "goodput_rps", "requests_arrived", "requests_rejected", "requests_timed_out", "requests_unfinished", "gpu_hours", "energy_kwh",
                "cost_usd"]


def write_day(out: DayOutcome, out_dir: str | Path) -> list[Path]:
    """The day's output set (costmodel/outputset.py: staged, manifested, published whole): day.csv
    (per hour, GPU, mode, policy), month.csv (the bills), each with its data dictionary
    (costmodel/schemas/day.py), and day.json (settings, profiles' provenance, prices, both tables)."""
    with outputset.publishing(out_dir, DAY_COMMAND) as stage:
        written = _write_day_files(out, stage)
    return outputset.published(written, stage, out_dir) + [Path(out_dir) / outputset.MANIFEST]


def _write_day_files(out: DayOutcome, d: Path) -> list[Path]:
    hours = out.hours
    lat = [c for b in out.slo.bounds for c in (b.column, *ci_columns(b.column))] + (list(UTIL_CI) if out.slo.max_utilisation is not None else [])
    cols = [c for c in HOUR_COLUMNS + lat if c in hours.columns]
    bills = pd.DataFrame([{**asdict(b), "meets_slo_every_hour": b.meets_slo_every_hour, "slo_verdict": b.slo_verdict, "answer": a}  # a tie named on every fleet of it
                          for b, a in zip(out.bills, answer_column(out.bills))])
    cfg = out.config
    modes = set(cfg.modes or ())
    doc = {"load": out.curve.source, "slo": cfg.slo, "compress": cfg.compress, "scaling": asdict(cfg.scaling),
           "settings": {"seed": cfg.seed, "workload": cfg.workload, "duration_s": cfg.duration_s, "max_replicas": cfg.max_replicas,
                        "load_scale": cfg.load_scale, "autoscale_headroom": cfg.autoscale_headroom, "engine": cfg.engine(),
                        "profiles": dict(cfg.profile_paths), "interval_s": cfg.interval_s,
                        "every_fleet": cfg.every_fleet, "hour_spans": cfg.hour_spans},
           "pricing": cfg.pricing.to_dict(), "prices": {h: asdict(p) for h, p in out.prices.items()},
           "hardware_specs": {h: p.hardware_spec().to_dict() for h, p in out.profiles.items()},
           "profiles": plan_provenance(out.profiles, modes) if modes else {h: profile_provenance(p) for h, p in out.profiles.items()},
           "span_s": out.curve.span_s, "expected_requests": out.curve.expected_requests,
           "peak_qps": out.curve.peak_qps, "peak_replicas": [{"hardware": h, "mode": m, "replicas": n, "replicas_low": out.peak_replicas_low.get((h, m), n)}
                                                                 for (h, m), n in out.peak_replicas.items()],
           "bills": bills.to_dict("records"), "hours": hours[cols].to_dict("records") if len(hours) else [], "wall_s": out.wall_s}
    docs = day_docs()
    return [*write_table(hours[cols] if len(hours) else hours, d / "day.csv", docs), *write_table(bills, d / "month.csv", docs),
            atomic.write_json(d / DAY_JSON, doc)]
