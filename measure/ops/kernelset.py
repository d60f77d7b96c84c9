"""Kernel sets: per GPU architecture, the kernels the committed campaigns chose for every unit
(precision, op, shape), shipped as data (measure/ops/kernelsets/<architecture>.json), so a campaign
on a fresh GPU of that architecture times one or two kernels per unit instead of every candidate
and self-checks only those. An architecture without a kernel set is autotuned (every candidate).

A kernel set is built from the op tables of the GPUs of its architecture (`build`): per unit the
winners of each table, fastest first, each once; `unit_s` is the campaign seconds per unit of each
op family measured where the set was last timed (the budget planner's estimate).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from measure.ops.table import read_rows, unit_key

AXES = ("m", "seqs", "q", "ctx")
DEFAULT_UNIT_S = 0.5  # a family no set has timed yet: seconds per unit the budget planner assumes


def row_axes(r: dict) -> dict:
    return {k: int(r[k]) for k in AXES if r.get(k) not in (None, "")}


@dataclass
class KernelSet:
    """Shipped kernel choices of one architecture (None name: no set; every unit autotuned)."""

    name: str | None
    units: dict[str, list[str]] = field(default_factory=dict)  # unit key -> kernels, fastest first
    unit_s: dict[str, float] = field(default_factory=dict)  # op family -> campaign seconds per unit
    check_s: float = 0.0  # seconds of the self-checks of the kernels used, when last timed
    sources: list[str] = field(default_factory=list)
    # op family -> precision -> kernels: a set that names one engine's kernels per family rather than
    # per unit (the "vllm" set: vLLM's own MoE), timed wherever the family runs
    families: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def choices(self, precision: str, op: str, at: dict, family: str | None = None) -> list[str]:
        """The kernels to time at this unit: the family's (a family-level set), its own, else those
        of the nearest shape of the same op and precision (log distance over the axes); [] without
        a set (autotune)."""
        if self.name is None:
            return []
        if family in self.families:
            return list(self.families[family].get(precision, []))
        key = unit_key(precision, op, at)
        if key in self.units:
            return list(self.units[key])
        best, dist = [], math.inf
        prefix = f"{precision}|{op}|"
        for k, names in self.units.items():
            if not k.startswith(prefix):
                continue
            other = dict(kv.split("=") for kv in k[len(prefix):].split(",") if "=" in kv)
            d = sum(abs(math.log1p(int(other.get(a, 0))) - math.log1p(at.get(a, 0))) for a in AXES if a in at or a in other)
            if d < dist:
                best, dist = names, d
        return list(best)

    def seconds(self, family: str) -> float:
        return float(self.unit_s.get(family, DEFAULT_UNIT_S))

    def to_dict(self) -> dict:
        return {"architecture": self.name, "sources": self.sources, "unit_s": self.unit_s, "check_s": self.check_s, "units": self.units,
                **({"families": self.families} if self.families else {})}


def load(name: str | None) -> KernelSet:
    """The shipped kernel set `name` (hardware.json architectures[...].kernel_set), or an empty
    one (autotune) for None."""
    if name is None:
        return KernelSet(None)
    f = resources.files("measure.ops").joinpath(f"kernelsets/{name}.json")
    if not f.is_file():
        from costmodel.errors import UserError

        raise UserError(f"no kernel set {name!r}", f"kernel sets are {', '.join(names())}")
    doc = json.loads(f.read_text())
    return KernelSet(name, doc.get("units", {}), doc.get("unit_s", {}), doc.get("check_s", 0.0), doc.get("sources", []), doc.get("families", {}))


def names() -> list[str]:
    """The shipped kernel sets (measure/ops/kernelsets/*.json)."""
    return sorted(p.name.removesuffix(".json") for p in resources.files("measure.ops").joinpath("kernelsets").iterdir() if p.name.endswith(".json"))


def build(name: str, op_dirs: list[str | Path], unit_s: dict | None = None, check_s: float = 0.0) -> KernelSet:
    """A kernel set from op tables (ops.csv): per unit each table's winner, fastest first."""
    timed: dict[str, dict[str, float]] = {}
    for d in op_dirs:
        for r in read_rows(Path(d) / "ops.csv"):
            if not r.get("ms") or not r.get("kernel"):
                continue
            k = unit_key(r["precision"], r["op"], row_axes(r))
            prev = timed.setdefault(k, {})
            prev[r["kernel"]] = min(float(r["ms"]), prev.get(r["kernel"], math.inf))
    units = {k: sorted(v, key=v.get) for k, v in sorted(timed.items())}
    return KernelSet(name, units, dict(unit_s or {}), check_s, [str(d) for d in op_dirs])


def unit_seconds(op_dir: str | Path) -> dict[str, float]:
    """Mean campaign seconds per unit of each op family in a run's ops.csv (its `unit_s` column; the
    mean, since the first unit of each kernel carries its compilation)."""
    by: dict[str, list[float]] = {}
    for r in read_rows(Path(op_dir) / "ops.csv"):
        if r.get("unit_s"):
            by.setdefault(r["family"], []).append(float(r["unit_s"]))
    return {f: round(sum(v) / len(v), 3) for f, v in sorted(by.items())}
