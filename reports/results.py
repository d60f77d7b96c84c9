"""The two result directories `report` reads: a `costmodel plan -o` directory (plan.json) and a
`costmodel simulate -o` directory (summary.csv, summary.json). Both become a `Results`: the
evaluated points (flat PointSummary rows) plus what is needed to price and explain them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware, validate_spec
from plan.pricing import PricingConfig

PLAN_KIND = "costmodel-plan"
PLAN_SCHEMA_VERSION = 1


@dataclass
class Results:
    kind: str  # "plan" | "simulate"
    path: Path
    points: pd.DataFrame  # flat PointSummary rows
    specs: dict[str, HardwareSpec]
    slo: str | None = None  # the plan's SLO (None for a simulate directory)
    pricing: PricingConfig | None = None  # the plan's pricing
    qps: list[float] | None = None
    profiles: dict[str, dict] = field(default_factory=dict)  # hardware -> reports.provenance.profile_provenance()
    cell_notes: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)  # the simulation/plan settings, for the assumptions section


def jsonable(x):
    """NaN/inf/pd.NA -> None, numpy scalars -> Python, recursively."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is pd.NA or x is None:
        return None
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def records(df: pd.DataFrame) -> list[dict]:
    return [jsonable(r) for r in df.astype(object).to_dict("records")] if not df.empty else []


def write_plan_json(path: Path, doc: dict) -> Path:
    return atomic.write_text(path, json.dumps(jsonable({"kind": PLAN_KIND, "schema_version": PLAN_SCHEMA_VERSION, **doc}), indent=1) + "\n")


def load_results(path: str | Path) -> Results:
    """A plan directory (or its plan.json) or a simulate directory (or its summary.csv)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"results {p} do not exist", "pass the -o directory of `costmodel plan` or `costmodel simulate`")
    if p.is_file():
        if p.name.endswith(".json") and p.name != "summary.json":
            return _load_plan(p)
        if p.name in ("summary.csv", "summary.json"):
            return _load_simulate(p.parent)
        raise UserError(f"{p} is neither a plan.json nor a simulate summary", "pass the -o directory of `costmodel plan` or `costmodel simulate`")
    if (p / "plan.json").exists():
        return _load_plan(p / "plan.json")
    if (p / "summary.csv").exists() or (p / "summary.json").exists():
        return _load_simulate(p)
    raise UserError(f"{p} holds neither plan.json nor summary.csv", "pass the -o directory of `costmodel plan` or `costmodel simulate`")


def _load_plan(p: Path) -> Results:
    from costmodel.jsonfile import read_json

    doc = read_json(p, "plan")
    if not isinstance(doc, dict) or doc.get("kind") != PLAN_KIND:
        raise UserError(f"{p} is not a costmodel plan", "pass the -o directory of `costmodel plan`")
    if doc.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise UserError(f"plan {p} has schema_version {doc.get('schema_version')!r}; this costmodel reads {PLAN_SCHEMA_VERSION}", "re-run `costmodel plan`")
    try:
        points = pd.DataFrame(doc["points"])
        specs = {h: validate_spec(h, d, str(p)) for h, d in doc["hardware_specs"].items()}
        notes = {(n["hardware"], n["mode"], float(n["qps"])): n["note"] for n in doc.get("cell_notes", [])}
        return Results("plan", p.parent, points, specs, slo=doc["slo"], pricing=PricingConfig.from_dict(doc["pricing"]),
                       qps=[float(q) for q in doc["settings"]["qps"]], profiles=doc.get("profiles", {}), cell_notes=notes,
                       settings=doc["settings"])
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"plan {p} is incomplete or malformed ({e.__class__.__name__}: {e})", "re-run `costmodel plan`") from None


def _load_simulate(d: Path) -> Results:
    meta = {}
    if (d / "summary.json").exists():
        from costmodel.jsonfile import read_json

        meta = read_json(d / "summary.json", "simulate summary")
    if (d / "summary.csv").exists():
        try:
            points = pd.read_csv(d / "summary.csv")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise UserError(f"{d / 'summary.csv'} is not a readable CSV ({e.__class__.__name__})", "re-run `costmodel simulate`") from None
    else:
        rows = _points_in(meta)
        if rows is None:
            raise UserError(f"{d / 'summary.json'} lists no points", "re-run `costmodel simulate`")
        points = pd.DataFrame(rows)
    need = ["mode", "hardware", "qps", "replicas", "stable", "throughput_rps", "output_tokens_per_s", "total_tokens_per_s", "gpu_busy_frac"]
    missing = [c for c in need if c not in points.columns]
    if points.empty or missing:
        raise UserError(f"{d} summary has no points or lacks columns {missing}", "re-run `costmodel simulate` with this costmodel version")
    specs = {}
    for h in dict.fromkeys(points["hardware"].astype(str)):
        specs[h] = _spec_for(h, meta)
    settings = {k: v for k, v in (meta.items() if isinstance(meta, dict) else []) if not isinstance(v, (list, dict))}
    return Results("simulate", d, points, specs, profiles=_profiles_for(points, meta), settings=settings)


def _points_in(meta) -> list | None:
    if isinstance(meta, list):
        return meta
    if isinstance(meta, dict):
        for k in ("points", "summaries", "summary"):
            if isinstance(meta.get(k), list):
                return meta[k]
    return None


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
    from costmodel.schemas.profile import Profile
    from costmodel.shipped import default_profile
    from reports.provenance import profile_provenance

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
