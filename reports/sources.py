"""The result directories a report is made from: a `costmodel plan -o` directory and a `costmodel
simulate -o` directory, read through their schemas (costmodel/schemas/plan.py, results.py), or a
`costmodel sweep -o` directory (its results.parquet). Each becomes a `Results`: the evaluated points
(flat PointSummary rows) plus what is needed to price and explain them (hardware specs, pricing,
profile provenance)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from costmodel import outputset
from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware, validate_spec
from costmodel.schemas.plan import PLAN_JSON, is_plan_dir, read_plan
from costmodel.schemas.profile import Profile
from costmodel.schemas.provenance import profile_provenance
from costmodel.schemas.results import SUMMARY_CSV, SUMMARY_JSON, is_simulation_dir, read_simulation
from costmodel.shipped import default_profile

SWEEP_TABLE = "results.parquet"  # simulate/sweep/run.py
from costmodel.costing import PricingConfig


@dataclass
class Results:
    kind: str  # "plan" | "simulate" | "sweep"
    path: Path
    points: pd.DataFrame  # flat PointSummary rows
    specs: dict[str, HardwareSpec]
    slo: str | None = None  # the plan's SLO (None for a simulate directory)
    pricing: PricingConfig | None = None  # the plan's pricing
    qps: list[float] | None = None
    profiles: dict[str, dict] = field(default_factory=dict)  # hardware -> costmodel.schemas.provenance.profile_provenance()
    cell_notes: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)  # the simulation/plan settings, for the assumptions section
    extras: dict = field(default_factory=dict)  # plan --seeds / --sensitivity records (plan.json "replicates", "sensitivity")


def load_results(path: str | Path) -> Results:
    """A plan directory (or its plan.json) or a simulate directory (or its summary.csv)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"results {p} do not exist", "pass the -o directory of `costmodel plan` or `costmodel simulate`")
    if p.is_file():
        if p.name.endswith(".json") and p.name != SUMMARY_JSON:
            return _load_plan(p)
        if p.name in (SUMMARY_CSV, SUMMARY_JSON):
            return _load_simulate(p.parent)
        raise UserError(f"{p} is neither a plan.json nor a simulate summary", "pass the -o directory of `costmodel plan` or `costmodel simulate`")
    if is_plan_dir(p):
        return _load_plan(p / PLAN_JSON)
    if is_simulation_dir(p):
        return _load_simulate(p)
    if (p / SWEEP_TABLE).exists() or outputset.written_by(p) == "sweep":  # every file checked against the sweep's manifest first
        return outputset.read_set(p, lambda root: _load_sweep(root, p), "re-run `costmodel sweep` into a new directory")
    raise UserError(f"{p} holds neither plan.json nor summary.csv (nor a sweep's {SWEEP_TABLE})",
                    "pass the -o directory of `costmodel plan`, `costmodel simulate` or `costmodel sweep`")


def _load_plan(p: Path) -> Results:
    doc = read_plan(p)
    try:
        specs = {h: validate_spec(h, d, str(p)) for h, d in doc.hardware_specs.items()}
        pricing = PricingConfig.from_dict(doc.pricing)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"plan {p} is incomplete or malformed ({e.__class__.__name__}: {e})", "re-run `costmodel plan`") from None
    return Results("plan", p.parent, doc.points, specs, slo=doc.slo, pricing=pricing, qps=doc.qps, profiles=doc.profiles,
                   cell_notes=doc.cell_notes, settings=doc.settings, extras={k: doc.raw[k] for k in ("replicates", "sensitivity") if k in doc.raw})


def _load_simulate(d: Path) -> Results:
    sim = read_simulation(d)
    specs = {h: _spec_for(h, sim.meta) for h in dict.fromkeys(sim.points["hardware"].astype(str))}
    settings = {k: v for k, v in sim.meta.items() if not isinstance(v, (list, dict))}
    return Results("simulate", d, sim.points, specs, profiles=_profiles_for(sim.points, sim.meta), settings=settings)


def _load_sweep(root: Path, d: Path) -> Results:
    """A `costmodel sweep -o` directory `d` (read through `root`, outputset.read_set): every point with a
    replica count is one row (kind plan: its fewest SLO-meeting replicas); the SLO is the sweep's when
    all its points share one."""
    try:
        table = pd.read_parquet(root / SWEEP_TABLE)
    except (OSError, ValueError) as e:
        raise UserError(f"sweep results {d / SWEEP_TABLE} cannot be read ({e.__class__.__name__})", "re-run `costmodel sweep` into a new directory") from None
    if "replicas" not in table or "hardware" not in table:
        raise UserError(f"sweep results {d / SWEEP_TABLE} have no finished points", "run the sweep to the end")
    points = table[table["replicas"].notna()].drop(columns=["meets_slo", "slo_failures"], errors="ignore").reset_index(drop=True)
    points["replicas"] = points["replicas"].astype(int)
    slos = sorted({str(v) for v in table.get("param_slo", pd.Series(dtype=str)).dropna()})
    varied = [c[len("param_"):] for c in ("param_price", "param_pricing") if c in table and table[c].nunique() > 1]
    settings = {"sweep": str(d), "points": len(table), **({"note": f"the sweep varied {', '.join(varied)}: results.csv prices each point by its "
                                                                "own; this report prices every point alike"} if varied else {})}
    specs = {h: _spec_for(h, {}) for h in dict.fromkeys(points["hardware"].astype(str))}
    return Results("sweep", d, points, specs, slo=slos[0] if len(slos) == 1 else None, profiles=_profiles_for(points, {}), settings=settings)


def _spec_for(hardware: str, meta) -> HardwareSpec:
    """The catalog entry, or the hardware a profile embedded in the summary describes."""
    try:
        return get_hardware(hardware)
    except UserError:
        for prof in _embedded_profiles(meta):
            hw = prof.get("hardware") if isinstance(prof, dict) else None
            if isinstance(hw, dict) and hw.get("id") == hardware:
                return validate_spec(hardware, hw, "the simulate summary")
        raise


def _embedded_profiles(meta) -> list:
    if not isinstance(meta, dict):
        return []
    p = meta.get("profiles") or meta.get("profile")
    if isinstance(p, dict) and "profile_id" in p:
        return [p]
    if isinstance(p, dict):
        return [v for v in p.values() if isinstance(v, dict)]
    if isinstance(p, list):
        return [v for v in p if isinstance(v, dict)]
    return []


def _profiles_for(points: pd.DataFrame, meta) -> dict[str, dict]:
    """Profile provenance per hardware: from profiles embedded in summary.json, else from the
    shipped default when the points name its profile_id, else only the points' provenance column."""
    out: dict[str, dict] = {}
    embedded = {}
    for d in _embedded_profiles(meta):
        try:
            prof = Profile.from_dict(d, "profile in summary.json")
            embedded[prof.profile_id] = prof
        except UserError:
            continue
    for (hw, pid), g in points.groupby(["hardware", "profile_id"] if "profile_id" in points else ["hardware", "hardware"], sort=False):
        prof = embedded.get(pid)
        if prof is None:
            try:
                cand = default_profile(str(hw))
                prof = cand if cand.profile_id == pid or pid == hw else None
            except UserError:
                prof = None
        if prof is not None:
            out[str(hw)] = profile_provenance(prof, modes=set(g["mode"]))
        else:
            kinds = sorted(set(str(x) for x in g.get("provenance", pd.Series(dtype=str)).dropna()))
            out[str(hw)] = {"profile_id": str(pid), "hardware": str(hw), "provenance": {"kind": ", ".join(kinds) or "unknown",
                            "source": "profile not available to the report; kinds as the simulator recorded them per point"}}
    return out
