"""What one GPU-hour costs: cloud rental (catalog price with its source, or a per-run override) or
on-premises ownership (purchase price amortised over the hours of its life, plus electricity for
the power it draws times the facility's PUE).

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
from costmodel.hardware import HardwareSpec, source_text
from costmodel.options import parse_key_values
from costmodel.schemas.plan import HOURS_PER_MONTH  # 8,760 h / 12: the convention cloud price sheets use
from costmodel.schemas.rundir import load_run

HOURS_PER_YEAR = 8760.0
DEFAULT_ELECTRICITY_USD_PER_KWH = 0.08
DEFAULT_PUE = 1.2
INDUSTRY_AVERAGE_PUE = 1.58
DEFAULT_AMORTISATION_YEARS = 4.0
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
    """How to price a GPU-hour. Overrides are keyed by hardware id."""

    onprem: bool = False
    price_usd_per_gpu_hour: dict = field(default_factory=dict)  # cloud rental overrides
    purchase_usd: dict = field(default_factory=dict)  # on-prem purchase price overrides
    electricity_usd_per_kwh: float = DEFAULT_ELECTRICITY_USD_PER_KWH
    pue: float = DEFAULT_PUE
    amortisation_years: float = DEFAULT_AMORTISATION_YEARS
    active_power_w: dict = field(default_factory=dict)  # hardware -> measured busy power (telemetry)
    active_power_source: dict = field(default_factory=dict)  # hardware -> where that number came from

    def validate(self) -> "PricingConfig":
        for what, d in (("price", self.price_usd_per_gpu_hour), ("purchase-usd", self.purchase_usd), ("telemetry power", self.active_power_w)):
            for k, v in d.items():
                if not (v == v) or v < 0:
                    raise UserError(f"--{what} {k}={v} is negative or not a number", "give a value >= 0")
        if not self.electricity_usd_per_kwh >= 0:
            raise UserError(f"--electricity-usd-per-kwh {self.electricity_usd_per_kwh} is negative", "give a price >= 0, e.g. 0.08")
        if not self.pue >= 1.0:
            raise UserError(f"--pue {self.pue} is below 1", "PUE is facility power / IT power, >= 1 (e.g. 1.2; industry average 1.58)")
        if not self.amortisation_years > 0:
            raise UserError(f"--amortisation-years {self.amortisation_years} is not positive", "give the years over which a GPU is written off, e.g. 4")
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
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__}).validate()


@dataclass(frozen=True)
class GpuPrice:
    """One GPU type's hourly cost model, before utilisation is known."""

    hardware: str
    basis: str  # "cloud" | "onprem"
    rate_usd_per_gpu_hour: float  # cloud rental, or on-prem purchase / (years * 8,760 h)
    rate_source: str
    active_power_w: float  # power drawn while busy
    power_source: str
    electricity_usd_per_kwh: float  # billed only on-prem (a cloud rental includes power)
    pue: float
    purchase_usd: float | None = None
    amortisation_years: float | None = None

    def power_w(self, busy_frac: float) -> float:
        """GPU power at utilisation `busy_frac` (0..1), before PUE."""
        return self.active_power_w * min(max(busy_frac, 0.0), 1.0)

    def electricity_usd_per_gpu_hour(self, busy_frac: float) -> float:
        if self.basis != "onprem":
            return 0.0
        return self.power_w(busy_frac) / 1000.0 * self.pue * self.electricity_usd_per_kwh

    def usd_per_gpu_hour(self, busy_frac: float) -> float:
        return self.rate_usd_per_gpu_hour + self.electricity_usd_per_gpu_hour(busy_frac)


def gpu_price(spec: HardwareSpec, cfg: PricingConfig) -> GpuPrice:
    """The hourly cost model of `spec` under `cfg` (overrides win over the catalog)."""
    if spec.id in cfg.active_power_w:
        power, psrc = float(cfg.active_power_w[spec.id]), cfg.active_power_source.get(spec.id, "measured telemetry")
    else:
        power = spec.board_power_w
        psrc = f"board power {spec.board_power_w:g} W x utilisation ({source_text(spec.sources.get('board_power_w', 'catalog'))})"
    if not cfg.onprem:
        if spec.id in cfg.price_usd_per_gpu_hour:
            rate, src = float(cfg.price_usd_per_gpu_hour[spec.id]), f"--price {spec.id}={cfg.price_usd_per_gpu_hour[spec.id]:g} (user override)"
        else:
            rate, src = spec.price_usd_per_gpu_hour, f"catalog: {source_text(spec.sources.get('price_usd_per_gpu_hour', 'catalog'))}"
        return GpuPrice(spec.id, "cloud", rate, src, power, psrc, 0.0, cfg.pue)
    if spec.id in cfg.purchase_usd:
        purchase, psrc_buy = float(cfg.purchase_usd[spec.id]), f"--purchase-usd {spec.id}={cfg.purchase_usd[spec.id]:g} (user override)"
    elif spec.purchase_usd is not None:
        purchase, psrc_buy = spec.purchase_usd, f"catalog: {source_text(spec.sources.get('purchase_usd', 'catalog'))}"
    else:
        raise UserError(f"{spec.id} has no purchase price in the catalog, so it cannot be priced on-premises", f"pass --purchase-usd {spec.id}=USD")
    rate = purchase / (cfg.amortisation_years * HOURS_PER_YEAR)
    src = f"purchase ${purchase:,.0f} / ({cfg.amortisation_years:g} y x 8,760 h); {psrc_buy}"
    return GpuPrice(spec.id, "onprem", rate, src, power, psrc, cfg.electricity_usd_per_kwh, cfg.pue, purchase, cfg.amortisation_years)


def telemetry_power(run_dir: str | Path) -> tuple[str, float, str]:
    """(hardware id, mean busy power W, source text) from a measured run's telemetry table: the mean
    `power_w` over samples with gpu_util_pct >= 50 (all samples when utilisation was not recorded)."""
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


@dataclass
class PricingOptions:
    """Pricing as a user states it (the plan/report options): overrides as GPU=USD texts, telemetry
    run directories; `pricing_config` checks them against each other."""

    price: tuple[str, ...] = ()
    onprem: bool = False
    purchase_usd: tuple[str, ...] = ()
    electricity_usd_per_kwh: float | None = None
    amortisation_years: float | None = None
    pue: float | None = None
    telemetry: tuple[str, ...] = ()

    def given(self) -> bool:
        return bool(self.price or self.onprem or self.purchase_usd or self.telemetry) or any(
            x is not None for x in (self.electricity_usd_per_kwh, self.amortisation_years, self.pue))


def pricing_config(o: PricingOptions) -> PricingConfig | None:
    """A validated PricingConfig from the options, or None when none was given."""
    if not o.given():
        return None
    if not o.onprem:
        for name, v in (("--purchase-usd", o.purchase_usd), ("--electricity-usd-per-kwh", o.electricity_usd_per_kwh), ("--amortisation-years", o.amortisation_years)):
            if v:
                raise UserError(f"{name} prices owned GPUs, but --onprem is not set", f"add --onprem, or drop {name} (cloud rental includes power and ownership)")
    elif o.price:
        raise UserError("--price sets a cloud rental, but --onprem prices owned GPUs", "drop --price, or use --purchase-usd GPU=USD with --onprem")
    power, psrc = {}, {}
    for run in o.telemetry:
        hw, w, src = telemetry_power(run)
        power[hw], psrc[hw] = w, src
    return PricingConfig(
        onprem=o.onprem,
        price_usd_per_gpu_hour=parse_key_values(o.price, "price"),
        purchase_usd=parse_key_values(o.purchase_usd, "purchase-usd"),
        electricity_usd_per_kwh=DEFAULT_ELECTRICITY_USD_PER_KWH if o.electricity_usd_per_kwh is None else o.electricity_usd_per_kwh,
        pue=DEFAULT_PUE if o.pue is None else o.pue,
        amortisation_years=DEFAULT_AMORTISATION_YEARS if o.amortisation_years is None else o.amortisation_years,
        active_power_w=power, active_power_source=psrc,
    ).validate()
