"""The issue-17 benchmark, printed from the committed op tables (no GPU needed):

    python -m measure.ops.targets data/runs/ops            # tables under data/runs/ops/{h100,h200}

1. targets per GPU and precision: composed batch-1 denoise step / roofline (<= 1.3x on H200 bf16
   and H100 fp8), AR decode batch 1 (<= 2x), prefill of 1024 tokens (<= 1.5x), the MoE layer at
   256 routed tokens as a share of the copy bandwidth measured in the same run (>= 80%);
1b. the achievable floor of each target pass from the same run's own ceilings (measured copy
   bandwidth, best measured GEMM rate): whether a target is reachable by per-op kernels at all;
2. the projection's own error: the H200 ops projected to the H100 per op (measure/ops/project.py)
   against the measured H100 ops, per op family and per composed pass;
3. composed vs whole-model: the committed transformers-engine medians (data/runs/h200-*: compiled
   where it exists, eager otherwise, labelled) at the same shapes, with the composed breakdown.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from costmodel.hardware import get_hardware
from costmodel.models import get_model
from costmodel.precision import get_precision
from costmodel.roofline import Roofline, Segment, expected_experts_touched
from measure.ops.compose import Seg, _resolved_calls, compose
from measure.ops.project import _op_defs, op_work, project_rows
from measure.ops.table import OpTable, read_rows

HW = {"h100": "h100-sxm", "h200": "h200"}
TARGETS = {"denoise_step": 1.3, "decode_step": 2.0, "prefill": 1.5}
SHAPES = {"denoise_step": Seg(1, 256, 1024), "decode_step": Seg(1, 1, 1024), "prefill": Seg(1, 1024, 0)}
# the H100 whole-model figure (no committed H100 run directory holds it)
H100_AR_DECODE_B1_COMPILED_MS = 8.05


def roofline_ms(kind: str, seg: Seg, hw: str, precision: str) -> float:
    model = "diffusiongemma-26b-a4b" if kind in ("denoise_step", "encoder_commit", "encoder_prefill") else "gemma4-26b-a4b"
    r = Roofline(get_model(model), get_hardware(hw), get_precision(precision), get_model("gemma4-26b-a4b-assistant"))
    return r.pass_cost(Segment(kind, seg.seqs, seg.tokens, seg.context)).roofline_ms


def moe_share(t: OpTable, precision: str, tokens: int = 256) -> tuple[float, float, float]:
    """(ms, TB/s of expert weights read, share of the measured copy bandwidth)."""
    m = get_model("gemma4-26b-a4b")
    ms = t.ms("moe", precision, {"m": tokens})
    wb = get_precision(precision).weight_bytes
    byts = expected_experts_touched(m.num_experts, m.top_k_experts, tokens) * m.expert_params * wb
    tbps = byts / (ms * 1e-3) / 1e12
    copy = t.meta.get("copy_bandwidth_tbps") or float("nan")
    return ms, tbps, tbps / copy


def categories(by_op: dict) -> dict:
    cat = {"moe": 0.0, "attention": 0.0, "dense GEMMs": 0.0, "lm_head+sampler": 0.0, "self-cond": 0.0, "norms/elementwise/router": 0.0}
    for op, ms in by_op.items():
        if op == "moe":
            cat["moe"] += ms
        elif op == "moe_dense_overlap":  # router + experts beside the dense MLP on two streams
            cat["moe+dense MLP+router (2 streams)"] = cat.get("moe+dense MLP+router (2 streams)", 0.0) + ms
        elif ".attn." in f".{op}":
            cat["attention"] += ms
        elif "sc_embed" in op:
            cat["self-cond"] += ms
        elif op.endswith("lm_head") or "sampler" in op:
            cat["lm_head+sampler"] += ms
        elif "gemm." in op or "gemm_act." in op:
            cat["dense GEMMs"] += ms
        else:
            cat["norms/elementwise/router"] += ms
    return cat


def whole_model_medians(runs_root: Path) -> list[tuple[str, str, int, int, int, float]]:
    """(label, pass kind, seqs, tokens, context, median gpu_ms) from the committed H200 runs."""
    import pandas as pd

    want = [("h200-dg-compiled-b1", "denoise_step", 1, "compiled"), ("h200-dg-eager", "denoise_step", 8, "eager"),
            ("h200-dg-compiled-b1", "encoder_commit", 1, "compiled"), ("h200-dg-compiled-b1", "encoder_prefill", 1, "eager in the compiled run"),
            ("h200-ar-eager", "prefill", 1, "eager"), ("h200-ar-compiled", "decode_step", 1, "compiled"),
            ("h200-ar-compiled-b32", "decode_step", 32, "compiled"), ("h200-mtp-compiled", "draft_step", 1, "compiled"),
            ("h200-mtp-compiled", "verify_step", 1, "compiled")]
    out = []
    for run, kind, seqs, label in want:
        parts = glob.glob(str(runs_root / run / "passes" / "*.parquet"))
        if not parts:
            continue
        df = pd.concat([pd.read_parquet(p) for p in parts])
        if "warmup" in df:
            df = df[~df["warmup"].fillna(False).astype(bool)]
        df = df[(df.pass_kind == kind) & (df.seqs == seqs)]
        if kind == "prefill":
            df = df[df.tokens_per_seq == 1024]
        if kind == "encoder_prefill":
            df = df[df.tokens_per_seq == 1024]
        if df.empty:
            continue
        tok = int(df.tokens_per_seq.mode().iloc[0])
        df = df[df.tokens_per_seq == tok]
        ctx = int(df.context_tokens.median())
        out.append((f"{run} ({label})", kind, seqs, tok, ctx, float(df.gpu_ms.median())))
    return out


def _print_targets(tables: dict) -> None:
    print("== 1. targets (composed pass / roofline of the same shape; MoE at 256 tokens / measured copy bandwidth)")
    print(f"{'GPU':5} {'prec':5} {'pass':13} {'shape':18} {'composed ms':>11} {'roofline ms':>11} {'ratio':>6} {'target':>7}  met")
    for g, t in tables.items():
        for prec in ("bf16", "fp8"):
            for kind, seg in SHAPES.items():
                c = compose(t, kind, [seg], prec)
                r = roofline_ms(kind, seg, HW[g], prec)
                tgt = TARGETS[kind]
                binding = kind != "denoise_step" or (g, prec) in (("h200", "bf16"), ("h100", "fp8"))
                print(f"{g:5} {prec:5} {kind:13} {f'{seg.seqs}x{seg.tokens} ctx {seg.context}':18} {c.ms:11.2f} {r:11.2f} {c.ms / r:6.2f} "
                      f"{'<=' + str(tgt) + 'x':>7}  {('yes' if c.ms / r <= tgt else 'NO') if binding else '(n/a)'}")
            _print_breakdowns(t, prec)
            ms, tbps, share = moe_share(t, prec)
            print(f"{g:5} {prec:5} {'moe layer':13} {'256 tok x top-8':18} {ms:11.3f} {'':>11} {'':>6} {'>=80%':>7}  "
                  f"{tbps:.2f} TB/s = {100 * share:.0f}% of copy {t.meta.get('copy_bandwidth_tbps', 0):.2f} TB/s -> {'yes' if share >= 0.8 else 'NO'}")


def _print_breakdowns(t: OpTable, prec: str) -> None:
    """Where each target pass's time goes (the categories of section 3), one line per pass."""
    for kind, seg in SHAPES.items():
        c = compose(t, kind, [seg], prec)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in categories(c.by_op).items() if v >= 0.005)
        print(f"{'':11} {kind}: {parts}, overhead {c.overhead_ms:.2f}")


# ---- 1b. achievable floor -------------------------------------------------------------------------
PEAK_FAMILIES = ("gemm", "gemm_act", "lm_head")


def gemm_peak(t: OpTable, precision: str, defs: dict | None = None) -> tuple[float, str, int]:
    """(flops per ms, op, m): the best rate any GEMM of this table reached at this precision, each
    op at its largest timed m. A measured ceiling rather than the catalog's dense peak: what this
    GPU's kernels deliver, so a floor built on it asks nothing no kernel here has shown. Rows of ops
    no pass composes any more (no OpDef, so no work to divide) are skipped."""
    defs = defs or _op_defs()
    best = (0.0, "", 0)
    for (prec, op), s in t.series.items():
        if prec != precision or op not in defs or defs[op].family not in PEAK_FAMILIES:
            continue
        m = max(s.grid(0))
        rate = op_work(op, precision, {"m": m}, defs)[0] / s.points[(m,)]
        best = max(best, (rate, op, m))
    return best


@dataclass
class Floor:
    """One pass's floor: per op, max(bytes / copy bandwidth, flops / GEMM peak) x calls, with the
    composed time of the same ops beside it."""

    kind: str
    precision: str
    peak_flops_per_ms: float
    peak_op: str
    peak_m: int
    copy_tbps: float
    overhead_ms: float
    by_op: dict  # op name -> floor ms of all its calls in the pass
    composed_by_op: dict  # op name -> composed ms of the same calls (compose.compose's by_op)

    @property
    def ops_ms(self) -> float:
        return sum(self.by_op.values())

    @property
    def ms(self) -> float:
        return self.ops_ms + self.overhead_ms

    @property
    def composed_ms(self) -> float:
        return sum(self.composed_by_op.values()) + self.overhead_ms

    def largest_excess(self, n: int = 3) -> list[tuple[str, float, float]]:
        """(op, composed ms, floor ms) of the n ops furthest above their floor: where a kernel
        change buys the most."""
        ex = sorted(self.by_op, key=lambda o: self.composed_by_op[o] - self.by_op[o], reverse=True)
        return [(o, self.composed_by_op[o], self.by_op[o]) for o in ex[:n]]

    def under_floor(self) -> tuple[float, int]:
        """(ms, ops) by which committed ops already beat their floor: the floor is a model, not a
        bound (small ops run from L2 faster than the copy rate; a GEMM at mid m can beat the
        largest-m rate), so a target missed by less than this is within the floor's own error."""
        under = [self.by_op[o] - c for o, c in self.composed_by_op.items() if c < self.by_op[o]]
        return sum(under), len(under)


def _call_floor_ms(op: str, precision: str, at: dict, peak: float, bytes_per_ms: float, defs: dict) -> float:
    """Floor of one call. An alternative op (OpDef.replaces) whose family op_work does not price is
    the sum of the floors of the ops it stands for, at the same axis values (compose.resolve only
    swaps calls of equal `at`). The FFN block on two streams (moe_dense) has its own op_work branch
    (its parts' work summed): one floor for the block, as its streams overlap."""
    try:
        flops, byts = op_work(op, precision, at, defs)
    except KeyError:
        if not defs[op].replaces:
            raise
        return sum(_call_floor_ms(r, precision, at, peak, bytes_per_ms, defs) for r in defs[op].replaces)
    return max(byts / bytes_per_ms, flops / peak)


def pass_floor(t: OpTable, kind: str, seg: Seg, precision: str) -> Floor:
    """The achievable floor of one pass from the table's own ceilings: the calls the composition
    runs (alternatives resolved as compose does), each at max(bytes / measured copy bandwidth,
    flops / measured GEMM peak), attention's flops counted against the same GEMM peak (so its
    floor is optimistic, never too high), plus the measured per-step overhead. A target below this
    cannot be met by any set of per-op kernels; above it, (target - floor) is what all ops' distance
    from their floors may add up to."""
    defs = _op_defs()
    peak, pop, pm = gemm_peak(t, precision, defs)
    copy = t.meta.get("copy_bandwidth_tbps")
    if not copy or not peak:
        raise ValueError(f"{t.gpu}: no measured copy bandwidth or no {precision} GEMM rows for a floor")
    by_op: dict[str, float] = {}
    composed: dict[str, float] = {}
    for c in _resolved_calls(t, kind, [seg], precision):
        name = c.op.name
        by_op[name] = by_op.get(name, 0.0) + _call_floor_ms(name, precision, c.at, peak, copy * 1e9, defs) * c.count
        composed[name] = composed.get(name, 0.0) + t.ms(name, precision, c.at) * c.count
    return Floor(kind, precision, peak, pop, pm, copy, t.overhead_ms(seg.seqs), by_op, composed)


def _print_floors(tables: dict) -> None:
    print("\n== 1b. achievable floor: per op call max(bytes / measured copy bandwidth, flops / measured GEMM peak) x count, "
          "attention flops against the same GEMM peak, + measured per-step overhead; slack = target - floor")
    for g, t in tables.items():
        for prec in ("bf16", "fp8"):
            for i, (kind, seg) in enumerate(SHAPES.items()):
                f = pass_floor(t, kind, seg, prec)
                if i == 0:
                    print(f"{g:5} {prec:5} GEMM peak {f.peak_flops_per_ms / 1e9:.1f} TFLOP/s ({f.peak_op} m={f.peak_m}), "
                          f"copy {f.copy_tbps:.2f} TB/s, overhead {f.overhead_ms:.3f} ms")
                r = roofline_ms(kind, seg, HW[g], prec)
                tgt = TARGETS[kind] * r
                slack = tgt - f.ms
                verdict = (f"reachable only if every op is within {100 * slack / f.ms:.0f}% of its floor" if slack >= 0
                           else "below the per-op floor: unreachable by per-op kernels")
                print(f"{'':11} {kind:13} roofline {r:5.2f} ms, target {tgt:5.2f} ms, floor {f.ms:5.2f} ms ({f.ms / r:.2f}x roofline), "
                      f"composed {f.composed_ms:5.2f} ms, slack {slack:+5.2f} ms, composed excess {f.composed_ms - f.ms:5.2f} ms: {verdict}")
                ex = ", ".join(f"{o} {c:.2f} vs {fl:.2f}" for o, c, fl in f.largest_excess())
                under_ms, n_under = f.under_floor()
                under = f"; {n_under} op{'s' if n_under > 1 else ''} already {under_ms:.2f} ms under the floor" if n_under else ""
                print(f"{'':25} largest excess (composed vs floor ms): {ex}{under}")


def _print_projection(root: Path, tables: dict) -> None:
    if "h100" in tables and "h200" in tables:
        for method in ("efficiency", "floor"):
            print(f"\n== 2. projection error ({method}): H200 ops projected per op to the H100 vs measured H100 ops")
            proj = OpTable(project_rows(read_rows(root / "h200" / "ops.csv"), "h200", "h100-sxm", method=method), tables["h200"].meta)
            meas = tables["h100"]
            fam_err: dict[tuple[str, str], list[float]] = {}
            for (prec, op), s in meas.series.items():
                if (prec, op) not in proj.series:
                    continue
                ps = proj.series[(prec, op)]
                fam = op.split(".")[0] if not op.startswith("asst.") else "asst." + op.split(".")[1]
                for k, v in s.points.items():
                    if k in ps.points:
                        fam_err.setdefault((fam, prec), []).append(ps.points[k] / v - 1)
            print(f"{'op family':22} {'prec':5} {'points':>6} {'median err':>10} {'median |err|':>12} {'p90 |err|':>9}")
            for (fam, prec), errs in sorted(fam_err.items()):
                ab = sorted(abs(e) for e in errs)
                print(f"{fam:22} {prec:5} {len(errs):6d} {100 * statistics.median(errs):+9.1f}% {100 * statistics.median(ab):11.1f}% "
                      f"{100 * ab[int(0.9 * (len(ab) - 1))]:8.1f}%")
            print(f"{'pass':14} {'prec':5} {'shape':18} {'projected':>9} {'measured':>9} {'error':>7}")
            for prec in ("bf16", "fp8"):
                for kind, seg in [*SHAPES.items(), ("decode_step", Seg(32, 1, 1024)), ("denoise_step", Seg(8, 256, 1024)),
                                  ("verify_step", Seg(1, 5, 1024)), ("draft_step", Seg(1, 1, 1024))]:
                    p = compose(proj, kind, [seg], prec).ms
                    m = compose(meas, kind, [seg], prec).ms
                    print(f"{kind:14} {prec:5} {f'{seg.seqs}x{seg.tokens} ctx {seg.context}':18} {p:9.2f} {m:9.2f} {100 * (p / m - 1):+6.1f}%")


def _print_whole_model(tables: dict, runs: Path) -> None:
    if "h200" in tables:
        print("\n== 3. composed (ops, H200 bf16) vs whole-model transformers passes measured on an H200 (data/runs)")
        t = tables["h200"]
        print(f"{'run':42} {'pass':15} {'shape':20} {'whole ms':>8} {'composed':>8} {'ratio':>6}  composed breakdown (ms)")
        for label, kind, seqs, tok, ctx, ms in whole_model_medians(runs):
            c = compose(t, kind, [Seg(seqs, tok, ctx)], "bf16")
            cats = categories(c.by_op)
            br = ", ".join(f"{k} {v:.2f}" for k, v in cats.items() if v >= 0.05) + f", overhead {c.overhead_ms:.2f}"
            print(f"{label:42} {kind:15} {f'{seqs}x{tok} ctx {ctx}':20} {ms:8.2f} {c.ms:8.2f} {ms / c.ms:6.2f}  {br}")
        if "h100" in tables:
            c = compose(tables["h100"], "decode_step", [Seg(1, 1, 1024)], "bf16")
            print(f"{'H100 AR compiled (issue 17 table)':42} {'decode_step':15} {'1x1 ctx 1024':20} {H100_AR_DECODE_B1_COMPILED_MS:8.2f} "
                  f"{c.ms:8.2f} {H100_AR_DECODE_B1_COMPILED_MS / c.ms:6.2f}")


def _print_chains(root: Path, tables: dict) -> None:
    chains = {g: root / g / "chain.json" for g in tables if (root / g / "chain.json").exists()}
    if chains:
        print("\n== 4. composition check: the pass chained op by op in one CUDA graph (measure/ops/chain.py) vs the composed sum of its ops")
        print(f"{'GPU':5} {'prec':5} {'pass':13} {'shape':18} {'chained ms':>10} {'composed':>9} {'ratio':>6}")
        for g, path in chains.items():
            for r in json.loads(path.read_text())["results"]:
                if "chained_ms" in r:
                    shape = "{}x{} ctx {}".format(r["seqs"], r["tokens"], r["context"])
                    print(f"{g:5} {r['precision']:5} {r['kind']:13} {shape:18} {r['chained_ms']:10.2f} {r['composed_ops_ms']:9.2f} {r['ratio']:6.3f}")


def _print_meta(tables: dict) -> None:
    for g, t in tables.items():
        m = t.meta
        print(f"\n{g}: {m.get('gpu_name')}, torch {m.get('versions', {}).get('torch')}, triton {m.get('versions', {}).get('triton')}, "
              f"copy {m.get('copy_bandwidth_tbps', 0):.2f} TB/s, {m.get('date')}, status {m.get('status')}, missing {m.get('missing_count')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops_root", nargs="?", default="data/runs/ops")
    ap.add_argument("--runs", default="data/runs", help="committed whole-model run directories")
    a = ap.parse_args(argv)
    root = Path(a.ops_root)
    tables = {g: OpTable.load(root / g) for g in HW if (root / g / "ops.csv").exists()}
    _print_targets(tables)
    _print_floors(tables)
    _print_projection(root, tables)
    _print_whole_model(tables, Path(a.runs))
    _print_chains(root, tables)
    _print_meta(tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
