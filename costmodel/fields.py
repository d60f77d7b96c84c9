"""Every number a user gives (an option, a workload or spec field, a trace or price-file cell, an
environment variable) is declared once as a `Field`: its kind (a whole count or a real), its range
and unit, and checked at the edge with one line naming the field, where it came from (the file and
row or point) and the fix in the user's own terms. Nothing is rounded, clipped or merged silently:
a fraction where a count is meant is refused, not rounded.

    TOKENS.named("prompt_tokens.min").check(10.5, "workload w.json")
    -> UserError: workload w.json: prompt_tokens.min 10.5 is not a whole number of tokens; ...

The ranges keep every draw finite (a gamma cv, a lognormal sigma, a think time, a trace's span) and
every run bounded; a bound a user may knowingly pass names its override (`override`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace

from costmodel.errors import UserError


@dataclass(frozen=True)
class Field:
    """A number's declared kind and range. `name` is what the user writes (`--seeds`, `arrival.cv`,
    `prompt_tokens`); `why` says what the range protects; `override` names how to pass a bound."""

    name: str
    lo: float = -math.inf
    hi: float = math.inf
    whole: bool = False  # a count: a fraction is refused, never rounded
    above: bool = False  # lo itself is excluded (a rate, a scale)
    unit: str = ""
    example: str = ""
    why: str = ""
    override: str = ""

    def named(self, name: str) -> "Field":
        return replace(self, name=name)

    def range_text(self) -> str:
        lo = f"> {self.lo:g}" if self.above else f">= {self.lo:g}"
        if math.isinf(self.hi):
            return lo
        if math.isinf(self.lo):
            return f"<= {self.hi:,g}"
        return f"in ({self.lo:g}, {self.hi:,g}]" if self.above else f"in [{self.lo:g}, {self.hi:,g}]"

    def _fix(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        unit = f" {self.unit}" if self.unit else ""
        eg = f", e.g. {self.example}" if self.example else ""
        return f"give {self.name} {kind} {self.range_text()}{unit}{eg}"

    def check(self, value, where: str = ""):
        """`value` as a float (an int for a whole field), or a UserError naming field, place and fix."""
        at = f"{where}: " if where else ""
        unit = f" {self.unit}" if self.unit else ""
        x = _number(value)
        if x is None or math.isnan(x):
            raise UserError(f"{at}{self.name} {value!r} is not a number{f' of {self.unit}' if self.unit else ''}", self._fix())
        if self.whole and not (math.isfinite(x) and x.is_integer()):
            raise UserError(f"{at}{self.name} {_show(value)} is not a whole number{f' of {self.unit}' if self.unit else ''} (it would be rounded)",
                            self._fix())
        low = x <= self.lo if self.above else x < self.lo
        if low or x > self.hi or not math.isfinite(x):
            why = f" ({self.why})" if self.why else ""
            over = f"; or pass {self.override} to run it" if self.override and x > self.hi and math.isfinite(x) else ""
            side = "below" if low else "above"
            bound = self.lo if low else self.hi
            raise UserError(f"{at}{self.name} {_show(value)}{unit} is {side} its bound of {bound:,g}{why}" if math.isfinite(x)
                            else f"{at}{self.name} {_show(value)} is not a finite number", self._fix() + over)
        return int(x) if self.whole else x


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:  # an int beyond a float
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _show(value) -> str:
    """A value as the user wrote it (10.5, not np.float64(10.5); a huge int shortened)."""
    if hasattr(value, "item"):
        value = value.item()
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def check_all(field: Field, values, where: str, row_label: str = "row", first_row: int = 1) -> list:
    """Each of `values` checked as `field`; a bad one is named by its row (1-based, `first_row` for a
    file's header offset)."""
    out = []
    for i, v in enumerate(values):
        out.append(field.check(v, f"{where} {row_label} {i + first_row}"))
    return out


# ---- shared declarations ------------------------------------------------------------------------
# Token counts (prompt, output, a system prompt): whole, at least one, below a billion (exact in a
# float, far above any model's context; a request above the replica's limit is refused later by name).
TOKENS = Field("tokens", 1, 1e9, whole=True, unit="tokens", example="512")
# A gamma arrival process's coefficient of variation: cv = 1 / sqrt(shape), the range vllm bench
# serve's --burstiness takes (costmodel.options BURSTINESS_MIN/MAX), so the gaps stay finite and nonzero.
GAMMA_CV = Field("arrival.cv", 1 / math.sqrt(1e3), 1 / math.sqrt(1e-3), unit="(gap std / mean)", example="3",
                 why="gaps of a burstier or more regular process underflow or overflow")
# A lognormal length's sigma (natural-log scale): 10 already spans e^47 between the 1e-6 quantiles.
LOGNORMAL_SIGMA = Field("sigma", 0, 10, example="0.6", why="a wider tail draws lengths no float holds")
LENGTH_MEDIAN = Field("median", 1, 1e9, unit="tokens", example="512")
# A session's mean think time between turns: a day at most (a longer one never reaches the next turn in a run).
THINK_S = Field("sessions.think_s", 0, 86400, unit="s", example="20", why="a turn a day later never arrives within a run")
APPS = Field("system_prompt.apps", 1, 1e6, whole=True, example="4")
TURNS = Field("sessions.turns", 1, 1e4, whole=True, example="5")
WEIGHT = Field("weight", 0, 1e12, example="1")
# Trace timestamps: a year between the first and the last request at most (a day simulation is 31 days).
TRACE_SPAN_S = Field("the trace's span", 0, 366 * 86400, unit="s", example="86400", why="a trace of more than a year")
# Load curves (plan --load-curve): at most 31 days (744 hours).
CURVE_HOURS = Field("hours", 0, 744, above=True, unit="h", example="24", why="a month of hours at most")
PEAK_HOUR = Field("peak_hour", 0, 24, example="14")
# Prices: a GPU-hour below $10,000 and a GPU below $10M (a typo of a few zeros, not a price); electricity, PUE, write-off years.
PRICE_USD_PER_GPU_HOUR = Field("price", 0, 1e4, unit="USD per GPU-hour", example="3.50")
PURCHASE_USD = Field("purchase-usd", 0, 1e7, unit="USD per GPU", example="30000")
ELECTRICITY_USD_PER_KWH = Field("--electricity-usd-per-kwh", 0, 10, unit="USD per kWh", example="0.08")
PUE = Field("--pue", 1, 5, example="1.2")
AMORTISATION_YEARS = Field("--amortisation-years", 0.25, 30, unit="years", example="4")
TERM_USD = Field("term", 0, 1e7, example="5000")  # a pricing term in USD or W per GPU (host cost, host power)
# Run sizes: `plan --seeds` re-plans every cell once per seed (100 seeds of the default plan: about two hours on 2 cores).
SEEDS = Field("--seeds", 1, 100, whole=True, example="5", why="each seed re-plans every GPU, mode and QPS", override="--max-seeds N")
MAX_SEEDS = Field("--max-seeds", 1, 1e6, whole=True, example="1000")
# A day (`plan --load-curve`): the requests it simulates over all its fleets (each GPU and mode, autoscaled and
# static), known before any is drawn or read: ~1M requests a minute on 2 cores, so the bound is about an hour.
DAY_REQUESTS = Field("the day's simulated requests", 1, 60_000_000, whole=True, example="10000000",
                     why="about an hour on 2 cores", override="--max-requests N")
MAX_REQUESTS = Field("--max-requests", 1, 1e12, whole=True, example="200000000")
# plan's search: replicas per (GPU, mode, QPS) and the crossover's bisection steps.
MAX_REPLICAS = Field("--max-replicas", 1, 100_000, whole=True, example="64")
REFINE_CROSSOVER = Field("--refine-crossover", 0, 64, whole=True, example="8", why="each step halves the bracket; 64 is below a float's resolution")
# A `vllm bench serve` result's prompts (completed, num_prompts): simulating it builds one request each,
# so it is bounded as a day is, before any request is built.
BENCH_PROMPTS = Field("completed", 0, DAY_REQUESTS.hi, whole=True, example="1000", why="a bench run above the bound of requests a simulation builds")
# A GPU entry's numbers (the catalog, a --hardware-file, a profile's hardware section): a datasheet's
# range, so a unit slip (memory in bytes, bandwidth in GB/s) is refused, not priced.
HARDWARE_FIELDS = {
    "memory_gb": Field("memory_gb", 0, 1e5, above=True, unit="GB", example="141"),
    "memory_bandwidth_tbps": Field("memory_bandwidth_tbps", 0, 1e3, above=True, unit="TB/s", example="4.8"),
    "tflops": Field("tflops", 0, 1e6, above=True, unit="TFLOP/s", example="989"),
    "board_power_w": Field("board_power_w", 0, 1e5, above=True, unit="W", example="700"),
    "price_usd_per_gpu_hour": PRICE_USD_PER_GPU_HOUR.named("price_usd_per_gpu_hour"),
    "purchase_usd": PURCHASE_USD.named("purchase_usd"),
}
