"""Per-GEMM tile tuning of the Triton fused-MoE layer (issue 17, target: the MoE layer at 256 routed
tokens >= 80% of the measured copy bandwidth), on the device:

    python -m measure.ops.tune_moe -o OUT.json [--tokens 256,1024] [--precisions bf16,fp8] [--budget-s 240]

The campaign (kernels.py `_moe_triton`) runs both expert GEMMs (gate_up 2816->1408, down 704->2816)
with ONE tile config. Here each GEMM gets its own: the layer is split into its parts (expert
alignment, [activation quantisation,] gate_up GEMM, gelu*up, [quantisation,] down GEMM with the
routing weights, the top-k sum), each part timed alone under a CUDA graph; the GEMMs over a
random sample of tile configs (BLOCK_M shared, as one alignment serves both); then the whole layer
with the best pair. Writes every config's time and the breakdown (JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from dataclasses import dataclass, field

import torch

from measure.ops.kernels import Bench, _moe_inputs, _moe_weights, moe_align, quant_rows_fast
from measure.ops.timing import copy_bandwidth_tbps, graph_ms

D_MODEL, EXPERTS, FFN, TOPK = 2816, 128, 704, 8


@dataclass
class Layer:
    """Inputs, weights and buffers of one MoE layer at m tokens."""

    m: int
    fp8: bool
    tensors: dict = field(default_factory=dict)


def build(m: int, fp8: bool, dev) -> Layer:
    x, ids, tw, m, d, e, f, topk = _moe_inputs({"m": m, "d": D_MODEL, "experts": EXPERTS, "ffn": FFN, "topk": TOPK}, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8)
    t = {"x": x, "ids": ids, "tw": tw.reshape(-1).contiguous(), "w1": w1, "w2": w2, "s1": s1, "s2": s2}
    R = m * topk
    t["inter"] = torch.empty(R, 2 * f, device=dev, dtype=torch.bfloat16)
    t["act"] = torch.empty(R, f, device=dev, dtype=torch.bfloat16)
    t["out2"] = torch.empty(R, d, device=dev, dtype=torch.bfloat16)
    return Layer(m, fp8, t)


def parts(L: Layer, bm: int, cfg1, cfg2) -> dict:
    """name -> callable, the layer's parts with gate_up config cfg1 and down config cfg2."""
    from measure.ops.triton_kernels.basic import fused_moe_gemm, gelu_mul

    t = L.tensors
    al = moe_align(t["ids"], EXPERTS, bm)
    xq = quant_rows_fast(t["x"]) if L.fp8 else (t["x"], None)
    aq = quant_rows_fast(t["act"]) if L.fp8 else (t["act"], None)

    def sc(s):
        return s.view(-1) if s is not None else None

    return {
        "align": lambda: moe_align(t["ids"], EXPERTS, bm),
        "quant_in": (lambda: quant_rows_fast(t["x"])) if L.fp8 else None,
        "gemm_gate_up": lambda: fused_moe_gemm(xq[0], t["w1"], t["inter"], *al, a_div=TOPK, cfg=cfg1, a_scale=sc(xq[1]), w_scale=t["s1"]),
        "gelu_mul": lambda: gelu_mul(t["inter"], t["act"]),
        "quant_mid": (lambda: quant_rows_fast(t["act"])) if L.fp8 else None,
        "gemm_down": lambda: fused_moe_gemm(aq[0], t["w2"], t["out2"], *al, a_div=1, cfg=cfg2, topk_w=t["tw"], a_scale=sc(aq[1]), w_scale=t["s2"]),
        "topk_sum": lambda: t["out2"].view(L.m, TOPK, D_MODEL).sum(1),
    }


def whole(L: Layer, bm: int, cfg1, cfg2):
    from measure.ops.triton_kernels.basic import fused_moe_gemm, gelu_mul

    t = L.tensors

    def run(i=0):
        al = moe_align(t["ids"], EXPERTS, bm)
        if L.fp8:
            xq, xs = quant_rows_fast(t["x"])
            fused_moe_gemm(xq, t["w1"], t["inter"], *al, a_div=TOPK, cfg=cfg1, a_scale=xs.view(-1), w_scale=t["s1"])
            gelu_mul(t["inter"], t["act"])
            aq, as_ = quant_rows_fast(t["act"])
            fused_moe_gemm(aq, t["w2"], t["out2"], *al, a_div=1, cfg=cfg2, topk_w=t["tw"], a_scale=as_.view(-1), w_scale=t["s2"])
        else:
            fused_moe_gemm(t["x"], t["w1"], t["inter"], *al, a_div=TOPK, cfg=cfg1)
            gelu_mul(t["inter"], t["act"])
            fused_moe_gemm(t["act"], t["w2"], t["out2"], *al, a_div=1, cfg=cfg2, topk_w=t["tw"])
        return t["out2"].view(L.m, TOPK, D_MODEL).sum(1)
    return run


def time_ms(fn, dev, est_ms: float = 0.1) -> float:
    ms, _, method = graph_ms(Bench(lambda i: fn(), 1, ""), dev, est_ms)
    return ms


def config_space(fp8: bool, bm: int) -> list[tuple]:
    bks = (128, 256) if fp8 else (64, 128, 256)
    return [(bm, bn, bk, 1, w, s) for bn, bk, w, s in itertools.product((32, 64, 128, 256), bks, (4, 8), (2, 3, 4, 5))
            if bn * bk * (1 if fp8 else 2) * s <= 160 * 1024]


def tune_gemm(L: Layer, dev, bm: int, which: str, base: tuple, sample: list[tuple], deadline: float) -> list[dict]:
    rows = []
    for cfg in sample:
        if time.time() > deadline:
            break
        c1, c2 = (cfg, base) if which == "gemm_gate_up" else (base, cfg)
        try:
            fn = parts(L, bm, c1, c2)[which]
            fn()
            rows.append({"cfg": list(cfg), "ms": time_ms(fn, dev)})
        except Exception as e:  # shared-memory overflow and the like: recorded, skipped
            rows.append({"cfg": list(cfg), "error": f"{type(e).__name__}: {str(e)[:120]}"})
    return rows


def tune_one(m: int, prec: str, dev, budget_s: float, base: tuple, rng: random.Random) -> dict:
    """Both GEMMs over sampled configs at BLOCK_M candidates, then the layer with the best pair."""
    L = build(m, prec == "fp8", dev)
    deadline = time.time() + budget_s
    out = {"m": m, "precision": prec, "base_cfg": list(base), "block_m": {}}
    per_bm_budget = budget_s / 3
    for bm in (16, 32, 64):
        space = config_space(L.fp8, bm)
        rng.shuffle(space)
        d = {}
        for which in ("gemm_gate_up", "gemm_down"):
            b = (bm,) + tuple(base[1:])
            d[which] = tune_gemm(L, dev, bm, which, b, [b] + space, min(deadline, time.time() + per_bm_budget / 2))
        ok = {w: min((r for r in d[w] if "ms" in r), key=lambda r: r["ms"], default=None) for w in d}
        if all(ok.values()):
            c1, c2 = tuple(ok["gemm_gate_up"]["cfg"]), tuple(ok["gemm_down"]["cfg"])
            br = {k: time_ms(f, dev) for k, f in parts(L, bm, c1, c2).items() if f is not None}
            d["best"] = {"gate_up": list(c1), "down": list(c2), "layer_ms": time_ms(whole(L, bm, c1, c2), dev), "breakdown_ms": br}
        out["block_m"][bm] = d
    out["base_layer_ms"] = time_ms(whole(L, base[0], base, base), dev)
    del L
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--tokens", default="256,1024")
    ap.add_argument("--precisions", default="bf16,fp8")
    ap.add_argument("--budget-s", type=float, default=240.0)
    a = ap.parse_args(argv)
    from measure.ops.triton_kernels import configs as cfgmod

    dev = torch.device("cuda")
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_bandwidth_tbps": copy_bandwidth_tbps(dev),
           "date": time.strftime("%Y-%m-%d"), "command": "python -m measure.ops.tune_moe " + " ".join(argv or []), "runs": []}
    import triton

    res["triton"] = triton.__version__
    combos = [(int(m), p) for m in a.tokens.split(",") for p in a.precisions.split(",")]
    rng = random.Random(0)
    for m, p in combos:
        base = cfgmod.moe_configs(m * TOPK / EXPERTS, p == "fp8")[0]
        r = tune_one(m, p, dev, a.budget_s / len(combos), base, rng)
        res["runs"].append(r)
        best = [v["best"] for v in r["block_m"].values() if "best" in v]
        b = min(best, key=lambda x: x["layer_ms"]) if best else None
        print(f"m={m} {p}: base {r['base_layer_ms']:.4f} ms; best {b and b['layer_ms']:.4f} ms {b and (b['gate_up'], b['down'])}; "
              f"breakdown {b and {k: round(v, 4) for k, v in b['breakdown_ms'].items()}}", flush=True)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
