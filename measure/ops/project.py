"""Per-op projection to another GPU: each op's measured efficiency (its roofline time on the source
GPU over its measured time) carried to the target GPU's roofline of the same op:
t_target = t_source x roofline_target / roofline_source, roofline = max(flops / dense peak of the
precision, bytes / memory bandwidth), catalog figures (costmodel/data/hardware.json) on both sides.

    python -m measure.ops.project data/runs/ops/h100 --from h100-sxm --to rtx-5090 --precisions fp8 -o data/runs/ops/rtx-5090-projected

writes a projected op table (kernel column "projected:<source kernel>") with its meta.json. The
projection's own error: `python -m measure.ops.targets` projects the H200 table to the H100 and
compares with the measured H100 table.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from costmodel.hardware import get_hardware
from costmodel.precision import get_precision
from measure.ops.kernels import attn_plan
from measure.ops.shapes import all_ops
from measure.ops.table import ANY, COLUMNS, OpTable, read_rows


def _op_defs() -> dict:
    from costmodel.models import get_model

    return all_ops(get_model("gemma4-26b-a4b"), get_model("gemma4-26b-a4b-assistant")).ops


def op_work(op_name: str, precision: str, at: dict, defs: dict | None = None) -> tuple[float, float]:
    """(flops, bytes) of one call of an op at its axis values: weights (at the precision's bytes per
    weight; attention's KV cache is bf16 in this profiler), activations in and out, logits fp32."""
    defs = defs or _op_defs()
    o = defs[op_name]
    p = o.p
    wb = get_precision("bf16" if precision == ANY else precision).weight_bytes
    fam = o.family
    if fam == "attn":
        seqs, q, ctx = int(at["seqs"]), int(at["q"]), int(at["ctx"])
        flops = byts = 0.0
        for nb, L, causal in attn_plan(q, ctx, p["mask"], p.get("window") or None):
            pairs = nb * L - (nb * (nb - 1) / 2 if causal else 0)
            flops += 4.0 * p["nq"] * p["hd"] * pairs * seqs
            byts += seqs * L * p["nkv"] * p["hd"] * 2 * (1 if p.get("k_eq_v") else 2) + 2 * seqs * nb * p["nq"] * p["hd"] * 2
        return flops, byts
    m = int(at["m"])
    if fam in ("gemm", "lm_head"):
        k, n = p["k"], p["n"]
        out_b = 4 if fam == "lm_head" else 2
        return 2.0 * m * k * n, k * n * wb + m * k * 2 + m * n * out_b
    if fam == "gemm_act":
        k, f = p["k"], p["f"]
        return 2.0 * m * k * 2 * f + 10.0 * m * f, k * 2 * f * wb + m * k * 2 + m * f * 2
    if fam == "moe":
        e, kk, d, f = p["experts"], p["topk"], p["d"], p["ffn"]
        touched = e * (1 - (1 - kk / e) ** m)
        return 2.0 * m * kk * 3 * d * f, touched * 3 * d * f * wb + m * d * 2 * 2 + m * kk * 3 * f * 2
    if fam == "moe_dense":  # the FFN block: the sum of its parts' work
        parts = (("gemm_act.mlp_gate_up", {"m": m}), ("gemm.mlp_down", {"m": m}), ("router", {"m": m}), ("moe", {"m": m}))
        fl = by = 0.0
        for name, at_ in parts:
            f_, b_ = op_work(name, precision, at_, defs)
            fl, by = fl + f_, by + b_
        return fl, by
    if fam == "router":
        return 2.0 * m * p["d"] * p["experts"], p["d"] * p["experts"] * 2 + m * p["d"] * 2
    if fam in ("rmsnorm",):
        return 8.0 * m * p["d"], m * p["d"] * 2 * 3
    if fam == "norm_fused":  # inputs read, residual read + written, outputs written
        norms = p["ins"] + (1 if p["ins"] == 2 else 0) + p["outs"]
        return 8.0 * m * p["d"] * norms, m * p["d"] * 2 * (p["ins"] + 2 + p["outs"])
    if fam == "act_mul":
        return 10.0 * m * p["d"], m * p["d"] * 2 * 3
    if fam == "qk_norm_rope":
        elems = m * (p["nq"] + p["nkv"]) * p["hd"]
        return 12.0 * elems, elems * 2 * 2
    if fam == "embed":
        return 0.0, m * p["d"] * 2 * 2
    if fam == "dg_sampler":
        return 12.0 * m * p["vocab"], m * p["vocab"] * (4 * 2 + 2)
    if fam == "ar_sampler":
        return 8.0 * m * p["vocab"], m * p["vocab"] * 4
    raise KeyError(fam)


def op_roofline_ms(op_name: str, precision: str, at: dict, hw, defs=None) -> float:
    defs = defs or _op_defs()
    flops, byts = op_work(op_name, precision, at, defs)
    # attention and precision-independent ops run in bf16 in both precisions here
    compute = "bf16" if precision == ANY or defs[op_name].family == "attn" else get_precision(precision).compute
    peak = float(hw.tflops[compute]) * 1e9
    return max(flops / peak, byts / (hw.memory_bandwidth_tbps * 1e9))


def project_rows(rows: list[dict], src_hw: str, dst_hw: str, precisions: list[str] | None = None, method: str = "floor",
                 to_precision: str | None = None) -> list[dict]:
    """method "efficiency": t x roof_dst / roof_src. "floor" (default): each op's smallest measured
    time on the source (its launch/latency floor, in practice the 1-token point) is carried as is
    and only the rest scales with the roofline: t_dst = floor + (t_src - floor) x roof_dst / roof_src.
    `to_precision`: the target roofline at another precision (e.g. bf16 ops -> int4 weight-only on a
    GPU that cannot hold bf16 weights): each op's efficiency is carried to that roofline and the
    rows are relabelled with it (precision-independent rows stay '*')."""
    src, dst = get_hardware(src_hw), get_hardware(dst_hw)
    defs = _op_defs()
    floors: dict[tuple[str, str], float] = {}
    if method == "floor":
        for r in rows:
            if r.get("ms"):
                k = (r["precision"], r["op"])
                floors[k] = min(floors.get(k, float("inf")), float(r["ms"]))
    out = []
    for r in rows:
        if not r.get("ms") or (precisions and r["precision"] not in (*precisions, ANY)):
            continue
        if r["op"] not in defs:  # a row of an op no pass composes any more (replaced by a fused op): not carried
            continue
        at = {k: int(float(r[k])) for k in ("m", "seqs", "q", "ctx") if r.get(k) not in (None, "")}
        rs = op_roofline_ms(r["op"], r["precision"], at, src, defs)
        dprec = to_precision if (to_precision and r["precision"] != ANY) else r["precision"]
        rd = op_roofline_ms(r["op"], dprec, at, dst, defs)
        t = float(r["ms"])
        fl = floors.get((r["precision"], r["op"]), 0.0)
        ms = fl + (t - fl) * rd / rs
        out.append({**r, "precision": dprec, "gpu": f"{dst.name} (projected from {r['gpu']})", "ms": f"{ms:.6g}",
                    "kernel": f"projected:{r['kernel']}", "method": f"projected per op from {src_hw} {r['precision']} ({method})",
                    "candidates": "", "n_in_graph": ""})
    return out


def projected_table(ops_dir: str | Path, src_hw: str, dst_hw: str, precisions: list[str] | None = None, method: str = "floor") -> OpTable:
    src = OpTable.load(ops_dir)
    rows = project_rows(read_rows(Path(ops_dir) / "ops.csv"), src_hw, dst_hw, precisions, method)
    meta = {**src.meta, "projected_from": {"ops_dir": str(ops_dir), "hardware": src_hw, "gpu_name": src.meta.get("gpu_name")},
            "gpu_name": get_hardware(dst_hw).name + " (projected)", "copy_bandwidth_tbps": None}
    return OpTable(rows, meta)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops_dir")
    ap.add_argument("--from", dest="src", required=True, help="catalog id of the GPU the table was measured on")
    ap.add_argument("--to", dest="dst", required=True, help="catalog id of the target GPU")
    ap.add_argument("--precisions", default=None, help="comma list to keep (default all)")
    ap.add_argument("--method", choices=("floor", "efficiency"), default="floor")
    ap.add_argument("--to-precision", default=None, help="target precision of the roofline the efficiencies are carried to (default: the row's)")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args(argv)
    precs = a.precisions.split(",") if a.precisions else None
    rows = project_rows(read_rows(Path(a.ops_dir) / "ops.csv"), a.src, a.dst, precs, a.method, a.to_precision)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "ops.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
    src_meta = json.loads((Path(a.ops_dir) / "meta.json").read_text())
    meta = {"gpu_name": get_hardware(a.dst).name + " (projected)", "hardware": a.dst, "projected_from": {"ops_dir": a.ops_dir, "hardware": a.src,
            "gpu_name": src_meta.get("gpu_name"), "date": src_meta.get("date")},
            "method": ("t_target = floor + (t_source - floor) x roofline_target / roofline_source per op, floor = the op's smallest measured time "
                       "(catalog peaks and bandwidths)") if a.method == "floor" else "t_target = t_source x roofline_target / roofline_source per op",
            "precisions": [a.to_precision] if a.to_precision else (precs or src_meta.get("precisions")), "source_precisions": precs, "overhead": src_meta.get("overhead"),
            "sliding_window": src_meta.get("sliding_window", 1024), "status": "projected",
            "command": "python -m measure.ops.project " + " ".join(argv or []), "versions": src_meta.get("versions")}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"wrote {out / 'ops.csv'} ({len(rows)} rows projected from {a.src} to {a.dst})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
