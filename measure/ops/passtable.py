"""Table pass models (profile `model_type: "table"`, costmodel/schemas/profile.py) from the operator
tables: every pass kind composed (measure/ops/compose.py) on a full grid of (sequences, tokens per
sequence, context), which the profile interpolates in log space, and the held-out error of that
interpolation on shapes that are not grid points (`costmodel fit` of an op table prints it per
pass kind: measure/fit/ops_runs.py).

Held-out shapes: per kind, every combination of grid values and geometric midpoints between
neighbouring grid values (rounded to integers) that is not itself a grid point, at most
HELDOUT_MAX per kind (an even subsample); each composed from the op tables directly and compared
with the table's interpolation.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

from costmodel.models import ASSISTANT_FOR, get_model
from costmodel.roofline import PASS_KINDS, get_pass_kind
from costmodel.schemas.profile import FitDiagnostics, PassTable, Profile
from measure.ops.compose import MODE_KINDS, MODEL_OF, Seg, compose, resolve
from measure.ops.shapes import pass_ops
from measure.ops.table import OpTable

CONTEXT = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
BATCH = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048]
CANVASES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
POW2_SQRT2 = sorted({int(round(2 ** (i / 2))) for i in range(0, 29)})  # 1 .. 16384 in sqrt(2) steps
GRID_BY_QUERY = {  # a pass kind's natural query tokens (PassKind.query_tokens) -> (seqs, tokens per sequence, context)
    "canvas": (CANVASES, [32, 64, 128, 256, 512], CONTEXT),
    "prompt": ([1, 2, 4, 8, 16, 32], POW2_SQRT2, CONTEXT),
    "one": (BATCH, [1], CONTEXT),
    "drafts+1": (BATCH, [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16], CONTEXT),
}
GRIDS = {k.name: GRID_BY_QUERY[k.query_tokens] for k in PASS_KINDS.values() if k.query_tokens in GRID_BY_QUERY}  # kind -> its grid
TOKEN_M = sorted({int(round(2 ** (i / 2))) for i in range(0, 39)})  # 1 .. 524288
HELDOUT_MAX = 600


def _sig(v: float) -> float:
    """5 significant digits: far below the interpolation error, a fifth of the profile's size."""
    return float(f"{v:.5g}")


def _mode_of(kind: str) -> str:
    return next(m for m, ks in MODE_KINDS.items() if kind in ks)


def token_part_ms(table: OpTable, kind: str, m: int, precision: str) -> float:
    """The token-proportional ops of a `kind` pass over m tokens (embedding, the layers' GEMMs,
    norms, router, MoE, projections): what a pass mixing kinds runs once over all its tokens."""
    mname = MODEL_OF[_mode_of(kind)]
    asst = ASSISTANT_FOR.get(mname) if get_pass_kind(kind).role == "assistant" else None  # only the assistant's pass runs it
    total = 0.0
    calls = resolve(pass_ops(get_model(mname), kind, [Seg(1, m, 0)], get_model(asst) if asst else None, alternatives=True), table, precision)
    for c in calls:
        if "m" in c.at and (c.where.startswith("layer:") or c.where == "top"):
            total += table.ms(c.op.name, precision, c.at) * c.count
    return total


def build_table(table: OpTable, kind: str, precision: str, hardware: str, source: str = "") -> PassTable:
    seqs, toks, ctxs = GRIDS[kind]
    ms = [[[_sig(compose(table, kind, [Seg(s, t, c)], precision).ms) for c in ctxs] for t in toks] for s in seqs]
    return PassTable(hardware=hardware, precision=precision, seqs=[float(x) for x in seqs], tokens_per_seq=[float(x) for x in toks],
                     context_tokens=[float(x) for x in ctxs], ms=ms, token_m=[float(x) for x in TOKEN_M],
                     token_ms=[_sig(max(token_part_ms(table, kind, m, precision), 1e-6)) for m in TOKEN_M],
                     overhead_ms=_sig(table.overhead_ms(1)), source=source)


def _between(grid: list[int]) -> list[int]:
    mids = {int(round(math.sqrt(max(a, 1) * b))) if a > 0 else b // 2 for a, b in zip(grid, grid[1:])}
    return sorted(mids - set(grid))


def heldout_shapes(kind: str) -> list[tuple[int, int, int]]:
    axes = GRIDS[kind]
    options = [sorted(set(a) | set(_between(a))) for a in axes]
    pts = [p for p in itertools.product(*options) if not all(v in a for v, a in zip(p, axes))]
    step = max(1, len(pts) // HELDOUT_MAX)
    return pts[::step]


@dataclass
class Heldout:
    kind: str
    n: int
    mape_pct: float
    max_pct: float


def heldout(table: OpTable, pt: PassTable, kind: str, precision: str) -> Heldout:
    errs = []
    for s, t, c in heldout_shapes(kind):
        truth = compose(table, kind, [Seg(s, t, c)], precision).ms
        errs.append(abs(pt.pass_ms(s, t, c) / truth - 1) * 100)
    return Heldout(kind, len(errs), statistics.fmean(errs), max(errs))


def attach(profile: Profile, table: OpTable, hardware: str, precision: str, source: str) -> dict[str, Heldout]:
    """Every pass model of the profile becomes a table model (its linear fit kept as the fallback)."""
    out = {}
    for m in profile.modes.values():
        for kind, pm in m.pass_models.items():
            pt = build_table(table, kind, precision, hardware, source)
            h = heldout(table, pt, kind, precision)
            d = pm.diagnostics
            lin = f"linear fallback fit: held-out {d.heldout_mape_pct:.1f}%" if d and d.heldout_mape_pct is not None else "linear fallback"
            pm.model_type, pm.table = "table", pt
            pm.diagnostics = FitDiagnostics(
                n_obs=sum(len(r) * len(r[0]) for r in pt.ms), mape_pct=0.0, heldout_mape_pct=round(h.mape_pct, 3),
                summary=f"table of composed passes, log-space interpolation; held-out: {h.n} off-grid shapes composed directly, "
                        f"MAPE {h.mape_pct:.2f}%, max {h.max_pct:.2f}% ({lin})")
            out[kind] = h
    profile.notes = [n for n in profile.notes if not n.startswith("pass models: tables")] + [
        "pass models: tables of composed operator times over (seqs, tokens per seq, context), interpolated in log space "
        "(model_type table; held-out MAPE in each model's diagnostics); the linear fits are kept for other GPUs"]
    return out
