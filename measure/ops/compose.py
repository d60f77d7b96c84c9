"""Composition: pass time = sum of its ops (per layer type, times layer counts) + the per-step
overhead term, from a measured op table (measure/ops/table.py), for every pass kind at any shape.
A step of mixed segments is priced as one forward (token ops over all tokens, attention per
segment, logits where the segments make them).

`write_runs` (called by `costmodel fit` of an op table, measure/fit/ops_runs.py) writes one run directory per mode (diffusion, ar, mtp) under RUN_PARENT, in the format
`costmodel fit` reads (manifest.json + passes/part-*.parquet; engine name "ops" with the kernel
per op in its identity), holding the composed pass times over the grid as observations.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from costmodel.models import ASSISTANT_FOR, get_model
from costmodel.modes import all_modes
from costmodel.roofline import PASS_KINDS, get_pass_kind
from measure.ops.shapes import pass_ops
from measure.ops.table import OpTable

# from the serving-mode registry: each mode's pass kinds and default model (a pass kind shared by
# several modes, prefill, is composed with the first mode that runs it)
MODE_KINDS = {m.name: m.pass_kinds for m in all_modes()}
MODEL_OF = {m.name: m.default_model for m in all_modes()}


@dataclass(frozen=True)
class Seg:
    seqs: int
    tokens: int
    context: int = 0


@dataclass
class Composed:
    kind: str
    ops_ms: float
    overhead_ms: float
    by_op: dict  # op name -> ms in this pass (all its calls)
    by_where: dict  # layer:sliding / layer:full / top / logits / sampler / self-conditioning -> ms

    @property
    def ms(self) -> float:
        return self.ops_ms + self.overhead_ms


def resolve(calls: list, table: OpTable, precision: str) -> list:
    """Keep one side of every alternative (an op whose `replaces` names other calls of the same
    layer type at the same axis values): the alternative where the table timed it around these axis
    values (never extrapolated) and it is faster than the sum of the calls it replaces, else those calls. Returns the calls the pass runs."""
    alts = [i for i, c in enumerate(calls) if c.op.replaces]
    if not alts:
        return calls
    drop: set[int] = set()
    for ai in alts:
        a = calls[ai]
        rep = [i for i, c in enumerate(calls) if c.op.name in a.op.replaces and c.where == a.where and c.at == a.at]
        use = False
        if table.covers(a.op.name, precision, a.at) and len(rep) == len(a.op.replaces):
            alt_ms = table.ms(a.op.name, precision, a.at)
            use = alt_ms < sum(table.ms(calls[i].op.name, precision, calls[i].at) for i in rep)
        drop.update(rep if use else [ai])
    return [c for i, c in enumerate(calls) if i not in drop]


def chosen_alternatives(table: OpTable, kind: str, segments, precision: str, model: str | None = None) -> set[str]:
    """Names of the alternative ops the composition uses for this pass (chain.py runs the same)."""
    return {c.op.name for c in _resolved_calls(table, kind, segments, precision, model) if c.op.replaces}


def _resolved_calls(table: OpTable, kind: str, segments, precision: str, model: str | None = None) -> list:
    segs = [segments] if hasattr(segments, "seqs") else list(segments)
    mode = next(m for m, ks in MODE_KINDS.items() if kind in ks)
    mname = model or MODEL_OF[mode]
    target = get_model(mname)
    asst_name = ASSISTANT_FOR.get(mname) if get_pass_kind(kind).role == "assistant" else None  # only the assistant's pass runs it
    asst = get_model(asst_name) if asst_name else None
    return resolve(pass_ops(target, kind, segs, asst, alternatives=True), table, precision)


def compose(table: OpTable, kind: str, segments, precision: str, model: str | None = None) -> Composed:
    """Price one forward pass of `kind` over `segments` (Seg / roofline Segment-like objects); a
    layer's alternative op (the FFN block on two streams) replaces its parts where it is faster."""
    segs = [segments] if hasattr(segments, "seqs") else list(segments)
    by_op: dict[str, float] = {}
    by_where: dict[str, float] = {}
    total = 0.0
    for c in _resolved_calls(table, kind, segs, precision, model):
        ms = table.ms(c.op.name, precision, c.at) * c.count
        by_op[c.op.name] = by_op.get(c.op.name, 0.0) + ms
        by_where[c.where] = by_where.get(c.where, 0.0) + ms
        total += ms
    batch = sum(s.seqs for s in segs)
    return Composed(kind, total, table.overhead_ms(batch), by_op, by_where)


# ---- the observation grid -----------------------------------------------------------------------
def default_grid(small: bool = False) -> dict[str, list[Seg]]:
    """Shapes at which passes are composed for fitting: canvases 1-64, AR batch 1-512, MTP k 1-8,
    contexts 128-32k, prefill chunks 64-8192."""
    ctx = [128, 1024, 4096, 16384, 32768] if not small else [128, 4096]
    canv = [1, 2, 4, 8, 16, 32, 64] if not small else [1, 8]
    batch = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] if not small else [1, 32]
    chunks = [64, 128, 256, 512, 1024, 2048, 4096, 8192] if not small else [256, 2048]
    ks = [1, 2, 3, 4, 6, 8] if not small else [1, 4]
    # every pass kind's shapes by its natural query tokens (PassKind.query_tokens)
    canvas: list[Seg] = [Seg(n, 256, c) for n in canv for c in ctx]
    prompt: list[Seg] = []
    for t in chunks:
        prompt += [Seg(s, t, 0) for s in ((1, 2, 4) if not small else (1,)) if s * t <= 16384]
        prompt += [Seg(1, t, c) for c in ((1024, 8192) if not small else ())]
    one: list[Seg] = []
    drafts: list[Seg] = []
    for b in batch:
        for c in ctx:
            if b * c > 2**22:
                continue  # beyond any GPU's KV capacity here (seqs x context > 4M tokens)
            one.append(Seg(b, 1, c))
            drafts += [Seg(b, k + 1, c) for k in ks if b * (k + 1) <= 4096]
    by_query = {"canvas": canvas, "prompt": prompt, "one": one, "drafts+1": drafts}
    return {k.name: list(by_query[k.query_tokens]) for k in PASS_KINDS.values() if k.query_tokens in by_query}


# ---- run directories for `costmodel fit` --------------------------------------------------------
def _manifest(mode: str, hardware: str, precision: str, meta: dict, kernels: dict, grid_name: str, ops_dir: str) -> dict:
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return {
        "run_id": f"ops-{hardware}-{precision}-{mode}-{uuid.uuid4().hex[:6]}",
        "kind": "gpu", "mode": mode, "model": MODEL_OF[mode], "weights": "random", "commit_source": "none",
        "hardware": hardware, "gpu_name": meta.get("gpu_name"), "precision": precision,
        "engine": {"name": "ops", "composed": True, "kernels": kernels,
                   **({"projected_from": meta["projected_from"].get("hardware")} if meta.get("projected_from") else {}), "overhead": "device round trip per step (meta.json overhead)",
                   "torch": (meta.get("versions") or {}).get("torch"), "triton": (meta.get("versions") or {}).get("triton")},
        "settings": {"grid": grid_name, "ops_dir": ops_dir, "op_table_date": meta.get("date"), "op_table_command": meta.get("command")},
        "software": meta.get("versions") or {}, "git_commit": None, "started_at": meta.get("date") or now, "finished_at": now,
        "status": "complete", "done_units": ["composed"], "planned_units": ["composed"],
        "notes": ["composed from operator timings (measure/ops): pass = sum of ops x layer counts + per-step overhead; "
                  "not a whole-model measurement", f"op table status {meta.get('status')}, {meta.get('missing_count', 0)} units missing"]
                 + ([f"PROJECTED op table: every op carried from {meta['projected_from'].get('hardware')} ({meta['projected_from'].get('gpu_name')}) "
                     "per op (measure/ops/project.py); no op was timed on this GPU"] if meta.get("projected_from") else []),
        "schema_version": 1, "host": "device",
    }


def write_runs(table: OpTable, precision: str, hardware: str, out_parent: str | Path, small: bool = False, ops_dir: str = "") -> list[Path]:
    import pandas as pd

    grid = default_grid(small)
    out_parent = Path(out_parent)
    paths = []
    for mode, kinds in MODE_KINDS.items():
        rows = []
        used_ops: set[str] = set()
        for kind in kinds:
            for s in grid[kind]:
                c = compose(table, kind, [s], precision)
                used_ops.update(c.by_op)
                rows.append({"unit": "composed", "pass_kind": kind, "seqs": s.seqs, "tokens_per_seq": s.tokens, "context_tokens": s.context,
                             "prompt_tokens": s.tokens if get_pass_kind(kind).query_tokens == "prompt" else s.context,
                             "gpu_ms": c.ms, "wall_ms": c.ms, "ops_ms": c.ops_ms, "overhead_ms": c.overhead_ms, "warmup": False,
                             "engine": "ops"})
        kernels = {op: table.kernel(op, precision) for op in sorted(used_ops)}
        d = out_parent / f"ops-{hardware}-{precision}-{mode}"
        (d / "passes").mkdir(parents=True, exist_ok=True)
        for old in (d / "passes").glob("part-*.parquet"):
            old.unlink()
        pd.DataFrame(rows).to_parquet(d / "passes" / "part-00000-composed.parquet", index=False)
        (d / "manifest.json").write_text(json.dumps(_manifest(mode, hardware, precision, table.meta, kernels,
                                                              "small" if small else "default", ops_dir), indent=1))
        paths.append(d)
    return paths
