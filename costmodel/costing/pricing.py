"""What one GPU-hour costs under a pricing model (models/: on-demand, reserved 1 y / 3 y, spot,
on-prem), from the catalog price with its source or a per-run override, the model's terms
(terms.py) and, for owned GPUs, electricity for the power drawn times the facility's PUE.

Power drawn by a GPU at utilisation u (the simulator's `gpu_busy_frac`) is `active_power_w * u`,
where `active_power_w` is the mean `power_w` a measured run's telemetry recorded while the GPU was
busy (`--telemetry RUN`), or else the catalog board power (the TDP, an upper bound while busy).
Idle draw is not added: this is the model the issue asks for, and it understates energy at low
utilisation (stated in every report's assumptions).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from costmodel.errors import UserError
from costmodel.fields import AMORTISATION_YEARS, ELECTRICITY_USD_PER_KWH, PRICE_USD_PER_GPU_HOUR, PUE, PURCHASE_USD, Field
from costmodel.hardware import HardwareSpec, source_text
from costmodel.options import parse_key_values
from costmodel.schemas.plan import HOURS_PER_MONTH  # 8,760 h / 12: the convention cloud price sheets use
from costmodel.costing.models import DEFAULT_MODEL, Terms, get_model, model_names
from costmodel.costing.options import PricingOptions  # the options as stated, in a module of their own (start-up)
from costmodel.costing.terms import check_term, resolve_terms

DEFAULT_ELECTRICITY_USD_PER_KWH = 0.08
DEFAULT_PUE = 1.2
INDUSTRY_AVERAGE_PUE = 1.58
DEFAULT_AMORTISATION_YEARS = 4.0
TELEMETRY_POWER_W = Field("--telemetry power", 0, 1e5, unit="W")  # a board's measured busy power: below 100 kW
BUSY_UTIL_PCT = 50.0  # telemetry samples at or above this gpu_util_pct count as "busy"

SOURCES = {
    "electricity": "aiinframap.com TCO tool (mid-2026): $0.08/kWh, PUE 1.2 (shared/reference/hardware.md); "
                   "US industrial electricity 6.0-19.1 c/kWh by state, EIA Electric Power Monthly table 5.6.A (Apr 2025)",
    "pue": "aiinframap.com TCO tool (mid-2026): PUE 1.2; industry average 1.58, Uptime Institute survey (Nov 2023)",
    "amortisation": "assumption: straight-line depreciation of the purchase price over 4 years of 8,760 h (no resale value, "
                    "no financing cost, servers/network/staff not included)",
    "hours_per_month": "730 h per month = 8,760 h / 12, the convention of cloud price sheets",
}


@dataclass(frozen=True)
class PricingConfig:
    """How to price a GPU-hour: a pricing model (models/) and its inputs. Overrides are keyed by hardware id."""

    model: str = DEFAULT_MODEL
    price_usd_per_gpu_hour: dict = field(default_factory=dict)  # cloud rental overrides
    purchase_usd: dict = field(default_factory=dict)  # on-prem purchase price overrides
    electricity_usd_per_kwh: float = DEFAULT_ELECTRICITY_USD_PER_KWH
    pue: float = DEFAULT_PUE
    amortisation_years: float = DEFAULT_AMORTISATION_YEARS
    active_power_w: dict = field(default_factory=dict)  # hardware -> measured busy power (telemetry)
    active_power_source: dict = field(default_factory=dict)  # hardware -> where that number came from
    terms: dict = field(default_factory=dict)  # pricing-term overrides (terms.py), every GPU

    @property
    def onprem(self) -> bool:
        return get_model(self.model).owned

    def validate(self) -> "PricingConfig":
        model = get_model(self.model)
        for k, v in self.terms.items():
            check_term(k, v, "--term")
            readers = [m for m in model_names() if k in get_model(m).terms]
            if readers and k not in model.terms:  # a term no part of this pricing reads would be accepted and ignored
                raise UserError(f"--term {k} applies to --pricing {' or '.join(readers)}, not {model.name}",
                                f"drop --term {k}, or add --pricing {readers[0]}")
        for fld, d in ((PRICE_USD_PER_GPU_HOUR.named("--price"), self.price_usd_per_gpu_hour), (PURCHASE_USD.named("--purchase-usd"), self.purchase_usd),
                       (TELEMETRY_POWER_W, self.active_power_w)):
            for k, v in d.items():
                fld.named(f"{fld.name} {k}").check(v)
        ELECTRICITY_USD_PER_KWH.check(self.electricity_usd_per_kwh)
        PUE.check(self.pue)
        AMORTISATION_YEARS.check(self.amortisation_years)
        return self

    def check_hardware(self, hardware_ids) -> None:
        """Every override must name a GPU this run prices."""
        known = set(hardware_ids)
        for what, d in (("price", self.price_usd_per_gpu_hour), ("purchase-usd", self.purchase_usd)):
            for k in d:
                if k not in known:
                    raise UserError(f"--{what} {k}=...: {k!r} is not among the GPUs of this run", f"use one of {', '.join(sorted(known))}")
        for k in self.active_power_w:
            if k not in known:
                raise UserError(f"--telemetry: the run measured {k}, which is not among the GPUs of this run", f"pass a run measured on one of {', '.join(sorted(known))}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PricingConfig":
        d = dict(d)
        if d.pop("onprem", False):  # plans written before pricing models
            d["model"] = "onprem"
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__}).validate()


@dataclass(frozen=True)
class GpuPrice:
    """One GPU type's hourly cost model, before utilisation is known."""

    hardware: str
    basis: str  # the pricing model's name (models/)
    rate_usd_per_gpu_hour: float  # the model's effective hourly rate, before electricity
    rate_source: str
    active_power_w: float  # power drawn while busy
    power_source: str
    electricity_usd_per_kwh: float  # billed only for owned GPUs (a rental includes power)
    pue: float
    purchase_usd: float | None = None
    amortisation_years: float | None = None
    upfront_usd_per_gpu: float = 0.0  # paid at the start of a commitment or a purchase
    term_years: float = 0.0
    host_power_w_per_gpu: float = 0.0  # owned: the host's draw per GPU
    on_demand_usd_per_gpu_hour: float = 0.0  # the on-demand price the model starts from
    output_input_price_ratio: float = 4.0  # splits the cost into input and output token prices
    terms: dict = field(default_factory=dict)  # every term the model read -> value
    term_sources: dict = field(default_factory=dict)

    def power_w(self, busy_frac: float) -> float:
        """GPU power at utilisation `busy_frac` (0..1), before PUE (the host's draw not included)."""
        return self.active_power_w * min(max(busy_frac, 0.0), 1.0)

    def electricity_usd_per_gpu_hour(self, busy_frac: float) -> float:
        if not get_model(self.basis).owned:
            return 0.0
        return (self.power_w(busy_frac) + self.host_power_w_per_gpu) / 1000.0 * self.pue * self.electricity_usd_per_kwh

    def usd_per_gpu_hour(self, busy_frac: float) -> float:
        return self.rate_usd_per_gpu_hour + self.electricity_usd_per_gpu_hour(busy_frac)


def _active_power(spec: HardwareSpec, cfg: PricingConfig) -> tuple[float, str]:
    if spec.id in cfg.active_power_w:
        return float(cfg.active_power_w[spec.id]), cfg.active_power_source.get(spec.id, "measured telemetry")
    return spec.board_power_w, f"board power {spec.board_power_w:g} W x utilisation ({source_text(spec.sources.get('board_power_w', 'catalog'))})"


def gpu_price(spec: HardwareSpec, cfg: PricingConfig) -> GpuPrice:
    """The hourly cost model of `spec` under `cfg` (overrides win over the catalog)."""
    power, psrc = _active_power(spec, cfg)
    if spec.id in cfg.price_usd_per_gpu_hour:
        od, od_src = float(cfg.price_usd_per_gpu_hour[spec.id]), f"--price {spec.id}={cfg.price_usd_per_gpu_hour[spec.id]:g} (user override)"
    else:
        od, od_src = spec.price_usd_per_gpu_hour, f"catalog: {source_text(spec.sources.get('price_usd_per_gpu_hour', 'catalog'))}"
    if spec.id in cfg.purchase_usd:
        buy, buy_src = float(cfg.purchase_usd[spec.id]), f"--purchase-usd {spec.id}={cfg.purchase_usd[spec.id]:g} (user override)"
    else:
        buy, buy_src = spec.purchase_usd, f"catalog: {source_text(spec.sources.get('purchase_usd', 'catalog'))}"
    model = get_model(cfg.model)
    values, sources = resolve_terms(spec.id, cfg.terms)
    used = tuple(model.terms) + ("output_input_price_ratio",)
    terms = Terms(values, sources)
    r = model.rate(spec, od, od_src, terms, buy, buy_src, cfg.amortisation_years)
    return GpuPrice(spec.id, model.name, r.usd_per_gpu_hour, r.source, power, psrc, cfg.electricity_usd_per_kwh, cfg.pue,
                    buy if model.owned else None, cfg.amortisation_years if model.owned else None, r.upfront_usd_per_gpu, r.term_years,
                    r.host_power_w_per_gpu, od, values["output_input_price_ratio"], {k: values[k] for k in used}, {k: sources[k] for k in used})


def telemetry_power(run_dir: str | Path) -> tuple[str, float, str]:
    """(hardware id, mean busy power W, source text) from a measured run's telemetry table: the mean
    `power_w` over samples with gpu_util_pct >= 50 (all samples when utilisation was not recorded)."""
    from costmodel.schemas.rundir import load_run  # run directories are tables (pandas): read only with --telemetry (issue 40)

    run = load_run(run_dir)
    hw = run.manifest.hardware
    if not hw:
        raise UserError(f"run {run_dir} does not record its hardware", "measure on a catalog GPU or fix the manifest's hardware field")
    if not run.has("telemetry"):
        raise UserError(f"run {run_dir} has no telemetry table", "measure with NVML telemetry on, or drop --telemetry to use board power x utilisation")
    t = run.table("telemetry")
    t = t[t["power_w"].notna()]
    busy = t[t["gpu_util_pct"] >= BUSY_UTIL_PCT] if "gpu_util_pct" in t and t["gpu_util_pct"].notna().any() else t
    if busy.empty:
        raise UserError(f"run {run_dir} has no telemetry samples with power while the GPU was busy", "drop --telemetry to use board power x utilisation")
    w = float(busy["power_w"].mean())
    return hw, w, f"measured: mean power_w {w:.0f} W over {len(busy)} busy telemetry samples of run {run.manifest.run_id}"


def read_price_file(path: str) -> tuple[dict, dict]:
    """(on-demand USD per GPU-hour, purchase USD) by hardware from a CSV with columns hardware,
    price_usd_per_gpu_hour and optionally purchase_usd; every row needs a price >= 0."""
    import pandas as pd  # the table library, where the price table is read: the pricing options load without it (issue 40)

    from costmodel.jsonfile import read_csv

    try:
        df = read_csv(path, "--price-file", dtype={"hardware": str})  # a column named twice refused
    except (OSError, ValueError) as e:
        raise UserError(f"--price-file {path} cannot be read ({e.__class__.__name__}: {str(e).splitlines()[0]})",
                        "give a CSV with columns hardware,price_usd_per_gpu_hour[,purchase_usd]") from None
    if "hardware" not in df or "price_usd_per_gpu_hour" not in df:
        raise UserError(f"--price-file {path} lacks the column hardware or price_usd_per_gpu_hour", "give a CSV with columns hardware,price_usd_per_gpu_hour[,purchase_usd]")
    if df.empty:  # a header alone would override nothing without a word
        raise UserError(f"--price-file {path} holds a header and no GPU", "add a row per GPU, e.g. h200,3.50")
    twice = df["hardware"].astype(str).duplicated()
    if twice.any():
        i = int(twice.to_numpy().argmax())
        raise UserError(f"--price-file {path} line {i + 2} prices {df['hardware'].iloc[i]} again", "give each GPU one row (never the last of two)")
    prices, buys = {}, {}
    for i, r in df.iterrows():
        for col, out in (("price_usd_per_gpu_hour", prices), ("purchase_usd", buys)):
            if col not in df or (col == "purchase_usd" and pd.isna(r[col])):
                continue
            v = pd.to_numeric(r[col], errors="coerce")
            if pd.isna(v) or v < 0:
                raise UserError(f"--price-file {path} row {i + 2} ({r['hardware']}): {col} {r[col]!r} is missing, negative or not a number",
                                "give every GPU a price >= 0")
            fld = PRICE_USD_PER_GPU_HOUR if col == "price_usd_per_gpu_hour" else PURCHASE_USD
            out[str(r["hardware"])] = fld.named(col).check(float(v), f"--price-file {path} row {i + 2} ({r['hardware']})")
    return prices, buys


def _model_of(o: PricingOptions) -> str:
    if o.onprem and o.pricing not in (None, "onprem"):
        raise UserError(f"--onprem and --pricing {o.pricing} name two pricing models", "give one: --pricing onprem or --pricing " + o.pricing)
    name = "onprem" if o.onprem else (o.pricing or DEFAULT_MODEL)
    get_model(name)
    return name


def pricing_config(o: PricingOptions) -> PricingConfig | None:
    """A validated PricingConfig from the options, or None when none was given."""
    if not o.given():
        return None
    model = get_model(_model_of(o))
    file_prices, file_buys = read_price_file(o.price_file) if o.price_file else ({}, {})
    if not model.owned:
        for name, v in (("--purchase-usd", o.purchase_usd), ("--electricity-usd-per-kwh", o.electricity_usd_per_kwh), ("--amortisation-years", o.amortisation_years)):
            if v:
                raise UserError(f"{name} prices owned GPUs, but --onprem is not set (pricing {model.name})",
                                f"add --onprem (--pricing onprem), or drop {name} (a rental includes power and ownership)")
    elif o.price:
        raise UserError("--price sets a cloud rental, but --onprem prices owned GPUs", "drop --price, or use --purchase-usd GPU=USD with --onprem")
    power, psrc = {}, {}
    for run in o.telemetry:
        hw, w, src = telemetry_power(run)
        power[hw], psrc[hw] = w, src
    return PricingConfig(
        model=model.name,
        price_usd_per_gpu_hour={**file_prices, **parse_key_values(o.price, "price")},
        purchase_usd={**file_buys, **parse_key_values(o.purchase_usd, "purchase-usd")},
        electricity_usd_per_kwh=DEFAULT_ELECTRICITY_USD_PER_KWH if o.electricity_usd_per_kwh is None else o.electricity_usd_per_kwh,
        pue=DEFAULT_PUE if o.pue is None else o.pue,
        amortisation_years=DEFAULT_AMORTISATION_YEARS if o.amortisation_years is None else o.amortisation_years,
        active_power_w=power, active_power_source=psrc,
        terms=parse_key_values(o.term, "term"),
    ).validate()
