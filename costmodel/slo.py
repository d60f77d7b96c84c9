"""Service-level objectives: "p95_ttft_ms<=1000,p95_e2e_ms<=5000" -> bounds on PointSummary
columns. A point meets the SLO when it is stable (steady state) and every bound holds."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.schemas.results import PERCENTILES

METRICS = ("ttft", "e2e", "tpot", "queue")
STATS = tuple(f"p{p}" for p in PERCENTILES) + ("mean",)
EXAMPLE = '--slo "p95_ttft_ms<=1000,p95_e2e_ms<=5000"'
_CLAUSE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|<|>=|>|==|=)\s*(.*?)\s*$")
_NAME = re.compile(r"^(p\d+|mean)_([a-z0-9]+)_ms$")


@dataclass(frozen=True)
class Bound:
    stat: str  # p50 | p90 | p95 | p99 | mean
    metric: str  # ttft | e2e | tpot | queue
    op: str  # "<=" or "<"
    limit_ms: float

    @property
    def column(self) -> str:
        """The flat PointSummary column it reads, e.g. ttft_ms_p95."""
        return f"{self.metric}_ms_{self.stat}"

    @property
    def text(self) -> str:
        return f"{self.stat}_{self.metric}_ms{self.op}{self.limit_ms:g}"

    def holds(self, value) -> bool:
        if value is None or not math.isfinite(float(value)):
            return False
        return value <= self.limit_ms if self.op == "<=" else value < self.limit_ms


@dataclass(frozen=True)
class Slo:
    bounds: tuple[Bound, ...]

    @property
    def text(self) -> str:
        return ",".join(b.text for b in self.bounds)

    def failures(self, row: dict) -> list[str]:
        """Why a flat PointSummary row misses the SLO ([] when it meets it)."""
        out = []
        if not bool(row.get("stable", False)):
            reason = row.get("stability_reason") or "queue grows without bound"
            out.append(f"unstable ({reason})")
        for b in self.bounds:
            v = row.get(b.column)
            if not b.holds(v):
                shown = "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.0f}"
                out.append(f"{b.column} {shown} > {b.limit_ms:g}" if b.op == "<=" else f"{b.column} {shown} >= {b.limit_ms:g}")
        return out

    def meets(self, row: dict) -> bool:
        return not self.failures(row)


STABLE_ONLY = Slo(())


def parse_slo(text: str | None) -> Slo:
    """Parse "p95_ttft_ms<=1000,p95_e2e_ms<=5000"; a bad clause raises a one-line UserError."""
    if text is None or not text.strip():
        raise UserError("--slo is empty", f"give bounds such as {EXAMPLE}")
    bounds: list[Bound] = []
    for clause in text.split(","):
        if not clause.strip():
            raise UserError(f"--slo {text!r} has an empty clause", f"separate bounds with single commas, e.g. {EXAMPLE}")
        m = _CLAUSE.match(clause)
        if not m:
            raise UserError(f"--slo clause {clause.strip()!r} is not METRIC<=VALUE", f"e.g. {EXAMPLE}")
        name, op, value = m.groups()
        if op not in ("<=", "<"):
            raise UserError(f"--slo clause {clause.strip()!r} uses {op!r}", "latency bounds are upper limits: use <= or <")
        n = _NAME.match(name.lower())
        if not n or n.group(1) not in STATS or n.group(2) not in METRICS:
            raise UserError(f"--slo metric {name!r} is unknown",
                            f"use STAT_METRIC_ms, STAT one of {'/'.join(STATS)}, METRIC one of {'/'.join(METRICS)} (e.g. p95_ttft_ms)")
        try:
            limit = float(value)
        except ValueError:
            raise UserError(f"--slo clause {clause.strip()!r}: {value!r} is not a number", f"e.g. {EXAMPLE}") from None
        if not math.isfinite(limit) or limit <= 0:
            raise UserError(f"--slo clause {clause.strip()!r}: the limit must be a positive number of milliseconds", f"e.g. {EXAMPLE}")
        b = Bound(n.group(1), n.group(2), op, limit)
        if any(x.column == b.column for x in bounds):
            raise UserError(f"--slo bounds {b.stat}_{b.metric}_ms twice", "give each metric once")
        bounds.append(b)
    return Slo(tuple(bounds))
