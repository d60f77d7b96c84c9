"""Check of the composition itself: every op of a pass run back to back in layer order (30 layers,
each op with the kernel the op table chose for it, its own weights rotating per layer) inside ONE
CUDA graph, timed, against the composed sum of the same ops timed alone. The data do not flow
between ops (each op reads its own inputs), but the kernel sequence, launch gaps and the memory
traffic between kernels are the real pass's.

    python -m measure.ops.chain --ops data/runs/ops/h100 --precisions bf16,fp8 -o chain.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from costmodel.models import get_model
from measure.ops.compose import MODEL_OF, MODE_KINDS, Seg, chosen_alternatives, compose
from measure.ops.shapes import layer_ops, top_ops
from measure.ops.table import ANY, OpTable, read_rows

SHAPES = [("decode_step", Seg(1, 1, 1024)), ("decode_step", Seg(32, 1, 1024)), ("denoise_step", Seg(1, 256, 1024)),
          ("prefill", Seg(1, 1024, 0)), ("verify_step", Seg(1, 5, 1024))]


def _kernel_for(rows_by_op: dict, op: str, precision: str, at: dict) -> str | None:
    rows = rows_by_op.get((precision, op)) or rows_by_op.get((ANY, op)) or []
    if not rows:
        return None

    def dist(r):
        return sum(abs(float(r[k] or 0) - float(at.get(k, 0))) / (1 + float(at.get(k, 0))) for k in at)
    return min(rows, key=dist)["kernel"]


class _Benches:
    """One built kernel per (op, shape): the op table's kernel first, any other only if that one
    cannot run here (recorded in `used`)."""

    def __init__(self, rows_by_op: dict, prec: str, dev):
        self.rows_by_op, self.prec, self.dev = rows_by_op, prec, dev
        self.built: dict[tuple, object] = {}
        self.used: dict[str, str] = {}

    def __call__(self, o, at):
        from measure.ops import kernels  # imports torch

        key = (o.name, tuple(sorted(at.items())))
        if key in self.built:
            return self.built[key]
        prec = self.prec
        k = _kernel_for(self.rows_by_op, o.name, prec, at)
        pr = ANY if o.precision_independent else prec
        k = _kernel_for(self.rows_by_op, o.name, pr, at) or k
        cands = [c for c in kernels.candidates(o.family, {**o.p, **at}, prec) if prec in c.precisions]
        errors = []
        for c in [c for c in cands if c.name == k] + [c for c in cands if c.name != k]:
            try:
                self.built[key] = c.build({**o.p, **at}, prec, self.dev)
                self.used[o.name] = c.name if c.name == k else f"{c.name} (table kernel {k} failed: {errors[0][:80]})"
                return self.built[key]
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        raise RuntimeError(f"no kernel runs {o.name} here: {errors[:2]}")


def _pass_sequence(kind: str, seg: Seg, m, bench, alts: set[str] = frozenset()) -> list:
    """(built op, layer index) in the order the pass runs them; `alts`: the alternative ops the
    composition chose for this pass (compose.chosen_alternatives), run instead of their parts."""
    mask = "bidirectional" if kind == "denoise_step" else "causal"
    T = seg.seqs * seg.tokens
    top = top_ops(m)
    seq = [(bench(top["embed"], {"m": T}), 0)]
    if kind in ("denoise_step", "encoder_commit"):
        for k in ("sc_embed", "sc_gate_up", "sc_down"):
            seq.append((bench(top[k], {"m": T}), 0))
    for i, lt in enumerate(m.layer_types):
        ops = layer_ops(m, lt, mask, alternatives=True)
        gone = {n for o, _ in ops if o.name in alts for n in o.replaces}
        for o, cnt in ops:
            if (o.replaces and o.name not in alts) or o.name in gone:
                continue
            at = {"seqs": seg.seqs, "q": seg.tokens, "ctx": seg.context} if o.family == "attn" else {"m": T}
            b = bench(o, at)
            seq.extend([(b, i)] * int(cnt))
    seq.append((bench(top["final_norm"], {"m": T}), 0))
    if kind != "encoder_prefill":
        L = seg.seqs if kind == "prefill" else T
        seq.append((bench(top["lm_head"], {"m": L}), 0))
        seq.append((bench(top["dg_sampler" if kind in ("denoise_step", "encoder_commit") else "ar_sampler"], {"m": L}), 0))
    return seq


def chain_ms(kind: str, seg: Seg, precision: str, dev, rows_by_op: dict, alts: set[str] = frozenset()) -> tuple[float, dict]:
    import torch  # heavy, optional: only the GPU check needs it

    from measure.ops.timing import graph_ms  # imports torch

    mode = next(m for m, ks in MODE_KINDS.items() if kind in ks)
    bench = _Benches(rows_by_op, "bf16" if precision == ANY else precision, dev)
    seq = _pass_sequence(kind, seg, get_model(MODEL_OF[mode]), bench, alts)

    class _All:
        copies = 1
        detail = "chain"

        @staticmethod
        def run(_i):
            for b, i in seq:
                b.run(i)

    ms, n, method = graph_ms(_All, dev, est_ms=50.0, replays=7)
    bench.built.clear()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return ms, {"method": method, "ops_in_chain": len(seq), "kernels": bench.used}


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", required=True, help="op table folder of this GPU")
    ap.add_argument("--precisions", default="bf16,fp8")
    ap.add_argument("--device", default=None)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--budget-s", type=float, default=240)
    a = ap.parse_args(argv)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = read_rows(Path(a.ops) / "ops.csv")
    from measure.ops import kernels

    kernels.set_components(a.ops)  # the moe_dense op builds its parts with this table's kernels
    by_op: dict = {}
    for r in rows:
        if r.get("ms"):
            by_op.setdefault((r["precision"], r["op"]), []).append(r)
    table = OpTable.load(a.ops)
    out = {"gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "ops_table": a.ops, "results": []}
    t0 = time.time()
    for prec in a.precisions.split(","):
        for kind, seg in SHAPES:
            if time.time() - t0 > a.budget_s:
                out.setdefault("skipped", []).append(f"{prec} {kind} {seg}")
                continue
            try:
                alts = chosen_alternatives(table, kind, [seg], prec)
                ms, info = chain_ms(kind, seg, prec, dev, by_op, alts)
                info["alternatives"] = sorted(alts)
                comp = compose(table, kind, [seg], prec)
                res = {"precision": prec, "kind": kind, "seqs": seg.seqs, "tokens": seg.tokens, "context": seg.context,
                       "chained_ms": ms, "composed_ops_ms": comp.ops_ms, "ratio": ms / comp.ops_ms, **info}
            except Exception as e:
                res = {"precision": prec, "kind": kind, "seqs": seg.seqs, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            out["results"].append(res)
            print(json.dumps({k: v for k, v in res.items() if k != "kernels"}), flush=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
