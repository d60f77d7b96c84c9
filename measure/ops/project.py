"""Per-op projection to another GPU: each op's measured efficiency (its roofline time on the source
GPU over its measured time) carried to the target GPU's roofline of the same op:
t_target = t_source x roofline_target / roofline_source, roofline = max(flops / dense peak of the
precision, bytes / memory bandwidth), catalog figures (costmodel/data/hardware.json) on both sides.

`costmodel fit OPS_RUN --hardware OTHER_GPU [--precision P]` projects the run's op table here
(measure/fit/ops_runs.py) before composing it: a projected table keeps each row's kernel as
"projected:<source kernel>" and its meta says where it came from (`projected_from`).
"""

from __future__ import annotations

from pathlib import Path

from costmodel.hardware import HardwareSpec
from costmodel.precision import get_precision
from measure.ops.shapes import all_ops
from measure.ops.table import ANY, OpTable, read_rows


def attn_plan(q: int, ctx: int, mask: str, window: int | None):
    """(list of (query_count, key_count, lower_right_causal) blocks) that cover the op's visible keys (the
    blocks the attention timings ran: a sliding window longer than the queries splits them)."""
    if mask == "bidirectional":
        L = ctx + q if not window else min(ctx + q, window)
        return [(q, L, False)]
    if not window or ctx + q <= window:
        return [(q, ctx + q, q > 1)]  # one query sees every cached key: no mask
    if q <= window:
        return [(q, min(ctx, window) + q, q > 1)]
    blocks = []
    done = 0
    while done < q:
        b = min(window, q - done)
        seen = min(ctx + done, window)
        blocks.append((b, seen + b, True))
        done += b
    return blocks


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


def project_rows(rows: list[dict], src: HardwareSpec, dst: HardwareSpec, precisions: list[str] | None = None, method: str = "floor",
                 to_precision: str | None = None) -> list[dict]:
    """method "efficiency": t x roof_dst / roof_src. "floor" (default): each op's smallest measured
    time on the source (its launch/latency floor, in practice the 1-token point) is carried as is
    and only the rest scales with the roofline: t_dst = floor + (t_src - floor) x roof_dst / roof_src.
    `to_precision`: the target roofline at another precision (e.g. bf16 ops -> int4 weight-only on a
    GPU that cannot hold bf16 weights): each op's efficiency is carried to that roofline and the
    rows are relabelled with it (precision-independent rows stay '*')."""
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
                    "kernel": f"projected:{r['kernel']}", "method": f"projected per op from {src.id} {r['precision']} ({method})",
                    "candidates": "", "n_in_graph": ""})
    return out


def projected_table(ops_dir: str | Path, src: HardwareSpec, dst: HardwareSpec, precision: str, to_precision: str | None = None) -> OpTable:
    """The op table of `ops_dir` (timed on `src`) at `precision`, projected per op to `dst`
    (floor method; `to_precision`: the target roofline's precision, e.g. bf16 ops -> int4 weight-only)."""
    table = OpTable.load(ops_dir)
    rows = project_rows(read_rows(Path(ops_dir) / "ops.csv"), src, dst, [precision], "floor", to_precision)
    m = table.meta
    meta = {"gpu_name": dst.name + " (projected)", "hardware": dst.id,
            "projected_from": {"ops_dir": str(ops_dir), "hardware": src.id, "gpu_name": m.get("gpu_name"), "date": m.get("date")},
            "method": ("t_target = floor + (t_source - floor) x roofline_target / roofline_source per op, floor = the op's smallest measured time "
                       "(catalog peaks and bandwidths)"),
            "precisions": [to_precision or precision], "source_precisions": [precision], "overhead": m.get("overhead"),
            "sliding_window": m.get("sliding_window", 1024), "status": "projected", "versions": m.get("versions")}
    return OpTable(rows, meta)
