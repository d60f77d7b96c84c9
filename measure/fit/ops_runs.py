"""`costmodel fit` of an operator table (data/runs/ops/<gpu>: ops.csv + meta.json, timed by the
project's former operator campaign; the what-if profiles costmodel/data/profiles/ops/ are built
from them by scripts/build_ops_profiles.sh): the op table composed into pass times over the default
grid (measure/ops/compose.py), fitted like any GPU run, then every pass model made a table of
composed passes interpolated in log space (measure/ops/passtable.py; the linear fit kept as the
fallback for other GPUs).

A table's GPU is its meta.json `hardware` (older op tables: matched by `gpu_name`); a table of
several precisions needs --precision. With --hardware naming another GPU, the table is first
projected per op to that GPU's roofline (measure/ops/project.py), and --precision may then name a
precision the table lacks whose matmuls run at one it has (int4 weight-only from bf16 ops): the
profile's every pass model says "projected".
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.errors import UserError
from costmodel.hardware import get_hardware, match_nvml_name
from costmodel.precision import get_precision
from costmodel.schemas.profile import Profile, Provenance
from costmodel.roofline import Segment
from measure.fit.assemble import FitOptions, FitResult, build_profile
from measure.ops.compose import write_runs
from measure.ops.passtable import attach
from measure.ops.project import projected_table
from measure.ops.table import OpTable

ENGINE_NOTE = ("engine: ops - pass times composed from operator timings (data/runs/ops: fastest serving-grade kernel per op and shape, "
               "CUDA-graph timed, + a per-step device round-trip term; an engine's CPU scheduler is not in it); kernels per op in engine.kernels")


def is_ops_run(path: str | Path) -> bool:
    """An operator run: ops.csv and meta.json (no manifest of passes)."""
    p = Path(path)
    return (p / "ops.csv").is_file() and (p / "meta.json").is_file()


def _run_hardware(meta: dict) -> str | None:
    """The catalog GPU the table was timed on: meta.json `hardware`, else its NVML `gpu_name` matched."""
    if meta.get("hardware"):
        return meta["hardware"]
    spec = match_nvml_name(meta["gpu_name"]) if meta.get("gpu_name") else None
    return spec.id if spec else None


def _target(path: Path, meta: dict, opts: FitOptions) -> tuple[str, str, str | None]:
    """(hardware id, precision, source precision to project from or None) of the profile: the options', else the run's."""
    own = _run_hardware(meta)
    hw = opts.hardware or own
    if hw is None:
        raise UserError(f"ops run {path} names no catalog GPU (meta.json hardware / gpu_name)", "pass --hardware ID (and --hardware-file for your own GPU)")
    project = own is not None and hw != own and not meta.get("projected_from")
    precs = [p for p in meta.get("precisions", []) if p != "*"]
    prec = opts.precision or (precs[0] if len(precs) == 1 else None)
    if prec is None:
        raise UserError(f"ops run {path} holds precisions {', '.join(precs) or 'none'}", "pass --precision to pick the profile's")
    src = prec
    if precs and prec not in precs:
        src = get_precision(prec).compute if project else None
        if src not in precs:
            raise UserError(f"ops run {path} has no {prec} ops (it holds {', '.join(precs)})", f"pass --precision {precs[0]}")
    return hw, prec, (src if project else None)


def _mark_projected(result: FitResult, meta: dict, path: Path) -> None:
    """A projected op table's profile says so in every pass model (no op was timed on its GPU)."""
    src = meta["projected_from"]
    what = (f"per-op projection of the {src.get('hardware')} operator table to {result.profile.hardware.id}'s roofline "
            f"(measure/ops/project.py), {path}")
    p = result.profile
    for m in p.modes.values():
        for pm in m.pass_models.values():
            pm.provenance = Provenance("projected", what, hardware=p.hardware.id, date=pm.provenance.date, notes=pm.provenance.notes)
    p.provenance = Provenance("projected", what, hardware=p.hardware.id, date=p.provenance.date, notes=p.provenance.notes)


def build_ops_profile(paths: list[str | Path], opts: FitOptions) -> FitResult:
    """The table profile of one ops run (see the module docstring)."""
    if len(paths) != 1:
        raise UserError(f"an ops run is fitted alone ({len(paths)} runs given)", "pass one ops run directory per `costmodel fit`")
    path = Path(paths[0])
    meta = json.loads((path / "meta.json").read_text())
    hw, prec, src = _target(path, meta, opts)
    if src is None:
        table = OpTable.load(path)
    else:  # another GPU: every op carried to its roofline first
        # the source GPU (the table's) and the target (--hardware), resolved once here
        table = projected_table(path, get_hardware(_run_hardware(meta)), get_hardware(hw), src, prec if prec != src else None)
        meta = table.meta
    if not table.has("moe", prec):
        raise UserError(f"ops run {path} has no {prec} MoE timings (status {meta.get('status')}, {meta.get('missing_count', '?')} units missing)",
                        "fit a precision the table holds completely")
    notes = list(opts.notes) if ENGINE_NOTE in opts.notes else [ENGINE_NOTE, *opts.notes]
    with tempfile.TemporaryDirectory(prefix="ops-composed-") as tmp:
        runs = write_runs(table, prec, hw, tmp, ops_dir=str(path))
        result = build_profile(runs, replace(opts, hardware=hw, precision=prec, notes=notes))
    held = attach(result.profile, table, hw, prec, f"measure/ops/passtable.py from the op table {path} ({prec})")
    result.messages.append("table pass models, held-out MAPE (max): "
                           + ", ".join(f"{k} {h.mape_pct:.2f}% ({h.max_pct:.1f}%)" for k, h in held.items()))
    if meta.get("missing_count"):
        result.messages.append(f"the ops run is incomplete ({meta['missing_count']} units missing): those shapes are interpolated")
    if meta.get("projected_from"):
        _mark_projected(result, meta, path)
    return result


@dataclass(frozen=True)
class ShapeDiff:
    mode: str
    kind: str
    seqs: float
    tokens: float
    context: float
    ms: float
    other_ms: float

    @property
    def err_pct(self) -> float:
        return 100.0 * (self.ms / self.other_ms - 1.0)


def compare_tables(profile: Profile, other: Profile) -> list[ShapeDiff]:
    """Pass costs of `profile` against `other` at every grid shape of other's table pass models
    (the modes and kinds both have): e.g. a fresh ops run's profile against the shipped one."""
    out = []
    for mode, m in other.modes.items():
        for kind, pm in m.pass_models.items():
            mine = profile.modes.get(mode)
            if pm.table is None or mine is None or kind not in mine.pass_models:
                continue
            t, own = pm.table, mine.pass_models[kind]
            for i, s in enumerate(t.seqs):
                for j, tok in enumerate(t.tokens_per_seq):
                    for k, c in enumerate(t.context_tokens):
                        ms = own.table.pass_ms(s, tok, c) if own.table is not None else profile.pass_ms(mode, (Segment(kind, int(s), int(tok), int(c)),))
                        out.append(ShapeDiff(mode, kind, s, tok, c, ms, t.ms[i][j][k]))
    if not out:
        raise UserError(f"profile {other.profile_id} has no table pass models in common with {profile.profile_id}", "compare with an ops profile")
    return out
