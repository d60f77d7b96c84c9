"""The day artefact (`costmodel plan --load-curve`, written by simulate/plan/day.py): a fleet per
interval of a day (`IntervalRow`, day.csv) and each fleet's day and month (`MonthBill`, month.csv).
Each field carries its meaning, unit and source, so the CSVs' data dictionaries and the finance
reports read one definition (costmodel/schemas/dictionary.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import pandas as pd

from costmodel import outputset
from costmodel.errors import UserError
from costmodel.schemas.columns import ColumnDoc, docs_of, meta

CLUSTER = "simulate/cluster (outcome.py)"
DAY = "simulate/plan/day.py"
DAY_H = 24.0
PER_DAY = "; a span other than 24 h (a load curve's hours=, a trace) scaled to 24 h, as the month scales the day"


@dataclass
class IntervalRow:
    """One pool (or the whole fleet, pool "fleet") over one interval."""

    pool: str = field(metadata=meta("the pool (GPU/mode, a fleet file's pool name) or 'fleet' for all pools together", "-", CLUSTER))
    hardware: str = field(metadata=meta("GPU catalog id(s) of the pool", "-", CLUSTER))
    mode: str = field(metadata=meta("serving mode(s) of the pool", "-", CLUSTER))
    interval: int = field(metadata=meta("interval index from the start of the day", "count", CLUSTER))
    start_s: float = field(metadata=meta("interval start, from the start of the day", "s", CLUSTER))
    end_s: float = field(metadata=meta("interval end", "s", CLUSTER))
    offered_qps: float = field(metadata=meta("requests arriving in the interval per second", "requests/s", CLUSTER))
    requests_arrived: int = field(metadata=meta("requests arriving in the interval", "count", CLUSTER))
    requests_rejected: int = field(metadata=meta("arrivals rejected by admission control (the routed replica's queue was full)", "count", CLUSTER))
    requests_timed_out: int = field(metadata=meta("arrivals rejected because they had not started within the queue timeout", "count", CLUSTER))
    requests_unfinished: int = field(metadata=meta("arrivals still running when the drain limit ended the run", "count", CLUSTER))
    goodput_rps: float = field(metadata=meta("requests of the interval that finished meeting every per-request SLO limit, per second", "requests/s", CLUSTER))
    slo_attainment: float = field(metadata=meta("share of the interval's arrivals that finished meeting every per-request SLO limit", "fraction 0-1", CLUSTER))
    meets_slo: bool = field(metadata=meta("every SLO bound holds on the interval's own statistic (rejected = infinitely late), and the headroom term", "bool", CLUSTER))
    utilisation: float = field(metadata=meta("share of step capacity used: busy time share x running sequences per step / the engine's running cap", "fraction 0-1", "simulate/cluster/pool.py"))
    replicas_mean: float = field(metadata=meta("mean replicas billed (provisioning, ready or draining) over the interval", "replicas", CLUSTER))
    replicas_max: int = field(metadata=meta("most replicas billed at once in the interval", "replicas", CLUSTER))
    gpu_hours: float = field(metadata=meta("GPU time billed in the interval", "GPU-h", CLUSTER))
    energy_kwh: float = field(metadata=meta("GPU energy: idle-to-board-power linear in utilisation (no PUE)", "kWh", "simulate/cluster/power.py"))
    cost_usd: float = field(metadata=meta("GPU-hours x the pool's price per GPU-hour", "USD", CLUSTER))
    latency_ms: dict = field(default_factory=dict)  # SLO bound column (e.g. ttft_ms_p95) -> its value over the interval, and its batch-means interval (_ci95_low/_high)
    slo_verdict: str = field(default="", metadata=meta("pass | fail | borderline: each bound's 95% batch-means interval wholly within it, one wholly beyond it, or "
                                                        "one straddling it (too close to call); the headroom term on the utilisation", "-", CLUSTER))
    slo_borderline: str = field(default="", metadata=meta("why a borderline interval is not settled (the interval straddling its bound)", "-", CLUSTER))

    def flat(self) -> dict:
        d = asdict(self)
        d.update(d.pop("latency_ms"))
        return d


@dataclass
class MonthBill:
    """One fleet (GPU, mode and policy; or a fleet file's pool, or the whole fleet) over the day and the month."""

    hardware: str = field(metadata=meta("GPU catalog id(s)", "-", DAY))
    mode: str = field(metadata=meta("serving mode(s)", "-", DAY))
    policy: str = field(metadata=meta("autoscaled | static (provisioned for the peak) | a fleet file's pool name | fleet (all pools)", "-", DAY))
    autoscaler: str = field(metadata=meta("the autoscaling policy and its target", "-", DAY))
    replicas_min: int = field(metadata=meta("fewest replicas of any interval (at its most)", "replicas", DAY))
    replicas_max: int = field(metadata=meta("most replicas at once", "replicas", DAY))
    requests_per_day: int = field(metadata=meta(f"requests arriving over the day{PER_DAY}", "count", DAY))
    rejected_per_day: int = field(metadata=meta(f"requests rejected (queue full or timed out) over the day{PER_DAY}", "count", DAY))
    slo_attainment: float = field(metadata=meta("share of the day's requests finishing within every per-request SLO limit", "fraction 0-1", DAY))
    hours_meeting_slo: int = field(metadata=meta("intervals whose own statistics meet the SLO", "count", DAY))
    hours: int = field(metadata=meta("intervals of the day", "count", DAY))
    gpu_hours_per_day: float = field(metadata=meta(f"GPU time billed over the day{PER_DAY}", "GPU-h", DAY))
    energy_kwh_per_day: float = field(metadata=meta(f"GPU energy over the day (no PUE){PER_DAY}", "kWh", DAY))
    cost_usd_per_day: float = field(metadata=meta(f"GPU-hours x price over the day{PER_DAY}", "USD", DAY))
    cost_usd_per_month: float = field(metadata=meta("the day repeated for 365.25/12 days", "USD", DAY))
    energy_kwh_per_month: float = field(metadata=meta("the day's energy repeated for 365.25/12 days", "kWh", DAY))
    saving_vs_static_frac: float = field(default=float("nan"), metadata=meta("1 - this fleet's monthly cost / the static peak fleet's", "fraction", DAY))
    note: str = field(default="", metadata=meta("why a fleet has no figures (no fleet meets the SLO at the peak)", "-", DAY))
    hours_borderline: int = field(default=0, metadata=meta("intervals whose SLO verdict is borderline (a bound's 95% batch-means interval straddles it: "
                                                           "day.csv slo_verdict)", "count", DAY))
    hours_failing: int = field(default=0, metadata=meta("intervals whose SLO verdict is a settled fail", "count", DAY))
    borderline: str = field(default="", metadata=meta("why the fleet is borderline: its borderline hours, and a peak fleet whose smaller counts' "
                                                      "verdicts are borderline", "-", DAY))
    replicas_peak: int = field(default=0, metadata=meta("the peak fleet's replicas: the fewest whose verdict at the peak rate is a settled pass "
                                                        "(the static fleet; the autoscaled fleet's target is the peak rate / this)", "replicas", DAY))
    replicas_peak_low: int = field(default=0, metadata=meta("the fewest replicas at the peak not settled to miss the SLO (below replicas_peak where "
                                                            "those counts' verdicts are borderline): the low end of the peak fleet's 95% interval", "replicas", DAY))
    cost_usd_per_month_low: float = field(default=float("nan"), metadata=meta(
        "the low end of the monthly cost's 95% interval: the same policy's day simulated from replicas_peak_low (cost_usd_per_month is the high end, "
        "from replicas_peak); equal to it where the peak verdict is settled", "USD", DAY))
    replicas_max_low: int = field(default=0, metadata=meta("most replicas at once of the low end's fleet (from replicas_peak_low)", "replicas", DAY))
    gpu_hours_per_day_low: float = field(default=float("nan"), metadata=meta(f"GPU time billed over the day by the low end's fleet{PER_DAY}", "GPU-h", DAY))
    energy_kwh_per_day_low: float = field(default=float("nan"), metadata=meta(f"GPU energy over the day of the low end's fleet{PER_DAY}", "kWh", DAY))

    @property
    def meets_slo_every_hour(self) -> bool:
        """Every interval of the day meets the SLO on its own statistics (and the fleet has figures);
        some may still be borderline (slo_verdict)."""
        return not self.note and self.hours > 0 and self.hours_meeting_slo == self.hours

    @property
    def slo_verdict(self) -> str:
        """fail: an hour misses (or no figures); borderline: an hour's or the peak's verdict is not
        settled; pass: every hour a settled pass."""
        if self.note or self.hours <= 0 or self.hours_failing or (not self.meets_slo_every_hour and not self.hours_borderline):
            return "fail"
        return "borderline" if self.hours_borderline or self.borderline or not self.meets_slo_every_hour else "pass"

    @property
    def cost_low(self) -> float:
        """The low end of the monthly cost's interval (the cost itself where none was simulated)."""
        lo = self.cost_usd_per_month_low
        return self.cost_usd_per_month if lo != lo or lo > self.cost_usd_per_month else lo


def over_a_day(bill: MonthBill, span_h: float) -> MonthBill:
    """A bill of a span other than 24 h (a load curve's hours=, a trace) as a day's: its per-day
    figures x 24/span_h, as the month scales the span, so that a one-hour day's 'per day' columns
    sit beside its monthly figures at the same scale (not 24x below them)."""
    k = DAY_H / span_h
    return replace(bill, requests_per_day=round(bill.requests_per_day * k), rejected_per_day=round(bill.rejected_per_day * k),
                   gpu_hours_per_day=bill.gpu_hours_per_day * k, energy_kwh_per_day=bill.energy_kwh_per_day * k,
                   cost_usd_per_day=bill.cost_usd_per_day * k)


DAY_COMMAND = "day"  # the output set's command (costmodel/outputset.py OWNED)
DAY_JSON = "day.json"
DAY_FILES = ("day.csv", "day.dictionary.csv", "day.dictionary.md", "month.csv", "month.dictionary.csv", "month.dictionary.md", DAY_JSON)


def bill_order(bill: MonthBill) -> tuple:
    """Fleets meeting the SLO every hour first, then those missing it, then those with no figures;
    cheapest first within each (the order month.csv, the console and the reports list them in)."""
    cost = bill.cost_usd_per_month if bill.cost_usd_per_month == bill.cost_usd_per_month else float("inf")
    return (bool(bill.note), not bill.meets_slo_every_hour, cost, -(bill.slo_attainment if bill.slo_attainment == bill.slo_attainment else 0.0))


def day_docs() -> dict:
    """Column docs of day.csv and month.csv (plus the columns plan's day adds to the rows)."""
    docs = docs_of(IntervalRow, CLUSTER)
    docs.update(docs_of(MonthBill, DAY))
    extra = {"policy": ("autoscaled | static (peak) | fleet (a fleet file's run)", "-"), "hour": ("hour of the day the interval starts", "h"),
             "simulated_s": ("seconds of the interval's arrivals simulated and judged: the interval, or for a day run hour by hour the span of the "
                             "hour's busiest minutes its verdict settled in (its counts, GPU-hours, energy and dollars are the whole hour's; docs/cluster.md)", "s"),
             "meets_slo_every_hour": ("every interval of the day meets the SLO (month.csv: fleets missing it are listed after those meeting it)", "bool"),
             "answer": ("'cheapest' for the cheapest fleet meeting the SLO every hour; 'tie' for each of several fleets of different GPUs "
                        "or modes whose monthly costs are within 1% or whose 95% intervals overlap (none wins); empty otherwise (and for a fleet file's pools)", "-"),
             "slo_verdict": ("pass | fail | borderline: the hour's (day.csv) or the fleet's (month.csv: borderline where an hour is, or the peak "
                             "fleet's smaller counts are; fail where an hour misses on its figures and is not borderline)", "-")}
    for col, end in ((c, e) for m in ("ttft", "e2e", "tpot", "queue") for st in ("p50", "p90", "p95", "p99", "mean")
                     for c, e in ((f"{m}_ms_{st}_ci95_low", "lower"), (f"{m}_ms_{st}_ci95_high", "upper"))):
        extra_doc = (f"{end} end of the 95% Student-t interval of {col.rsplit('_ci95', 1)[0]} over the hour's batch means "
                     "(its requests in arrival order cut into 10 batches; simulate/cluster/outcome.py)")
        docs[col] = ColumnDoc(col, extra_doc, "ms", CLUSTER)
    for end in ("low", "high"):
        docs[f"utilisation_ci95_{end}"] = ColumnDoc(f"utilisation_ci95_{end}", f"{'lower' if end == 'low' else 'upper'} end of the 95% Student-t "
                                                    "interval of the hour's utilisation over 10 equal sub-windows (with a max_utilisation term)",
                                                    "fraction 0-1", CLUSTER)
    docs.update({k: ColumnDoc(k, m, u, DAY) for k, (m, u) in extra.items()})
    return docs


def read_bills(folder) -> list[MonthBill]:
    """The bills of a `plan --load-curve -o DIR` (its month.csv) as MonthBill records, for the reports."""
    path = Path(folder) / "month.csv"
    if not path.is_file():
        raise UserError(f"{folder} holds no month.csv", "give the -o directory of `costmodel plan --load-curve`")
    df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    names = [f.name for f in fields(MonthBill)]
    optional = {f.name for f in fields(MonthBill)[fields(MonthBill).index(next(f for f in fields(MonthBill) if f.name == "hours_borderline")):]}
    missing = [n for n in names if n not in df.columns and n not in optional]
    if missing:
        raise UserError(f"{path} lacks column(s) {', '.join(missing)}", "re-run `costmodel plan --load-curve` with this costmodel version")
    out = []
    for r in df[[n for n in names if n in df.columns]].to_dict("records"):
        for k in ("note", "borderline"):
            r[k] = r[k] if isinstance(r.get(k), str) else ""
        out.append(MonthBill(**r))
    return out


@dataclass
class DayRecord:
    """A `plan --load-curve -o DIR` output set as the reports read it (verified against its manifest)."""

    path: Path
    bills: list[MonthBill]  # in bill_order
    hours: pd.DataFrame  # day.csv
    doc: dict  # day.json: load, slo, settings, pricing, prices, hardware_specs, profiles (provenance), peak_replicas

    @property
    def slo(self) -> str:
        return str(self.doc.get("slo", ""))

    @property
    def load(self) -> str:
        return str(self.doc.get("load", ""))

    @property
    def span_h(self) -> float:
        return float(self.doc.get("span_s", 86400.0)) / 3600.0


def is_day_dir(folder) -> bool:
    p = Path(folder)
    return p.is_dir() and (p / DAY_JSON).is_file() and (p / "month.csv").is_file()


def _hours(path: Path) -> pd.DataFrame:
    """day.csv's rows; none where no fleet was simulated (no fleet fits at the peak: an empty table)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def read_day(folder) -> DayRecord:
    """The day's output set, read once through its manifest (costmodel/outputset.py read_set)."""

    def read(root: Path) -> DayRecord:
        try:
            doc = json.loads((root / DAY_JSON).read_text(encoding="utf-8"))
            hours = _hours(root / "day.csv")
        except (OSError, ValueError) as e:
            raise UserError(f"{folder}/{DAY_JSON} or day.csv cannot be read ({e.__class__.__name__})",
                            "re-run `costmodel plan --load-curve -o DIR`") from None
        if "profiles" not in doc or "prices" not in doc:
            raise UserError(f"{folder} was written by a costmodel before day reports (its day.json has no profiles or prices)",
                            "re-run `costmodel plan --load-curve -o DIR`")
        return DayRecord(Path(folder), sorted(read_bills(root), key=bill_order), hours, doc)

    return outputset.read_set(folder, read, rerun="re-run `costmodel plan --load-curve -o DIR`")
