"""Flat tables with their data dictionary: every column an artefact's CSV can hold (simulation
results, plan costs), its meaning, unit and source - read from the schemas' own field
documentation - and the writer of a CSV with `<name>.dictionary.csv` and `.dictionary.md` beside it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from costmodel import atomic
from costmodel.modes import all_modes
from costmodel.schemas.columns import ColumnDoc, docs_of
from costmodel.schemas.plan import PLAN_DOCS
from costmodel.schemas.results import METRICS, PERCENTILES, REQUEST_DOCS, SIM, STATS, PointSummary

_PCT = re.compile(r"^(" + "|".join(METRICS) + r")_ms_(p\d+|mean)$")
_BATCH = re.compile(r"^batch_(.+)_seqs$")
_SEED = re.compile(r"^replicas_seed_(\d+)$")
_UNIT_SUFFIX = (("_ms", "ms"), ("_s", "s"), ("_frac", "fraction 0-1"), ("_rps", "requests/s"), ("_w", "W"), ("_kw", "kW"),
                ("_usd", "USD"), ("_tokens", "tokens"), ("_gb", "GB"))


def known_columns() -> dict[str, ColumnDoc]:
    """Every named column of the simulation and plan schemas (the mode's meaning lists the registry)."""
    docs = docs_of(PointSummary, SIM)
    docs.update({d.column: d for d in PLAN_DOCS})
    modes = "; ".join(f"{m.name} = {m.description}" for m in all_modes())
    docs["mode"] = ColumnDoc("mode", f"serving mode: {modes}", "-", SIM)
    return docs


def describe(column: str) -> ColumnDoc:
    """Meaning, unit and source of a column (named columns, then patterns, then the unit suffix)."""
    known = known_columns()
    if column in known:
        return known[column]
    m = _PCT.match(column)
    if m:
        metric, stat = m.groups()
        return ColumnDoc(column, f"{STATS.get(stat, stat)} of {METRICS[metric]}, over completed requests", "ms", SIM)
    m = _SEED.match(column)
    if m:
        return ColumnDoc(column, f"fewest SLO-meeting replicas with seed {m.group(1)} (plan --seeds)", "count", "simulate/plan/sensitivity.py")
    m = _BATCH.match(column)
    if m:
        return ColumnDoc(column, f"mean sequences per forward pass in {m.group(1)} passes (batch composition)", "sequences", SIM)
    unit = next((u for suf, u in _UNIT_SUFFIX if column.endswith(suf)), "-")
    return ColumnDoc(column, f"simulator field {column} (named by the simulator; not described further by this costmodel version)", unit, SIM)


def dictionary(columns, docs: dict | None = None) -> pd.DataFrame:
    """One row per column; `docs` (column -> ColumnDoc) describes an artefact's own columns first."""
    docs = docs or {}
    return pd.DataFrame([(docs.get(c) or describe(c)).__dict__ for c in columns], columns=["column", "meaning", "unit", "source"])


def _cell(v):
    if isinstance(v, (list, tuple)):
        return "; ".join(str(x) for x in v)
    return v


def flat_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Flatten what is left nested (dict cells -> one column per key; lists -> "a; b"), round floats
    to 6 decimals, keep one header row."""
    out = {}
    for c in df.columns:
        col = df[c]
        if col.dtype == object and col.map(lambda v: isinstance(v, dict)).any():
            keys = sorted({k for v in col if isinstance(v, dict) for k in v})
            for k in keys:
                out[f"{c}_{k}"] = col.map(lambda v, k=k: v.get(k) if isinstance(v, dict) else None)
            continue
        if col.dtype == object:
            col = col.map(_cell)
        elif pd.api.types.is_float_dtype(col):
            col = col.round(6)
        out[c] = col
    return pd.DataFrame(out, index=df.index)


def dictionary_paths(csv_path: str | Path) -> tuple[Path, Path]:
    p = Path(csv_path)
    stem = p.name[:-4] if p.name.lower().endswith(".csv") else p.name
    return p.with_name(f"{stem}.dictionary.csv"), p.with_name(f"{stem}.dictionary.md")


def dictionary_markdown(d: pd.DataFrame, title: str) -> str:
    lines = [f"# Data dictionary: {title}", "", "One row per column of the CSV: meaning, unit and source.", "",
             "| column | meaning | unit | source |", "|---|---|---|---|"]
    for r in d.to_dict("records"):
        lines.append("| " + " | ".join(str(r[k]).replace("|", "/") for k in ("column", "meaning", "unit", "source")) + " |")
    return "\n".join(lines) + "\n"


def write_table(df: pd.DataFrame, path: str | Path, docs: dict | None = None) -> list[Path]:
    """Write the flat CSV and its dictionary (.dictionary.csv and .dictionary.md); returns the paths.
    `docs`: the artefact's own column docs (e.g. costmodel/schemas/day.py), ahead of the simulation and plan schemas'."""
    flat = flat_frame(df)
    path = Path(path)
    atomic.write_csv(path, flat)
    d = dictionary(flat.columns, docs)
    dcsv, dmd = dictionary_paths(path)
    atomic.write_csv(dcsv, d)
    atomic.write_text(dmd, dictionary_markdown(d, path.name))
    return [path, dcsv, dmd]


def reference_markdown() -> str:
    """Every column the simulation and plan artefacts can hold (docs/metrics.md is this text:
    `python -m costmodel.schemas.dictionary > docs/metrics.md`)."""
    point_cols = [c for c in PointSummary.__dataclass_fields__ if c not in METRICS_FIELDS]
    stats = [f"p{p}" for p in PERCENTILES] + ["mean"]
    point_cols += [f"{m}_ms_{s}" for m in METRICS for s in stats]
    sections = [
        ("Per request (`requests_*.parquet`)", pd.DataFrame([d.__dict__ for d in REQUEST_DOCS])),
        ("Per simulated point (`summary.csv`, `plan.json` points)", dictionary(point_cols)),
        ("Added by a plan (`plan.csv`) and by reports", dictionary([d.column for d in PLAN_DOCS])),
    ]
    out = ["# Metrics and columns", "", "Generated from the schemas' field documentation by "
           "`python -m costmodel.schemas.dictionary` (a test checks this file is current).", ""]
    for title, d in sections:
        out += [f"## {title}", "", "| column | meaning | unit | source |", "|---|---|---|---|"]
        out += ["| " + " | ".join(str(r[k]).replace("|", "/") for k in ("column", "meaning", "unit", "source")) + " |" for r in d.to_dict("records")]
        out.append("")
    return "\n".join(out)


METRICS_FIELDS = tuple(f"{m}_ms" for m in METRICS) + ("batch_composition",)

if __name__ == "__main__":
    print(reference_markdown(), end="")
