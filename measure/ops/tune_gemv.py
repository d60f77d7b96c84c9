"""Tile sweep of the small-batch Triton GEMVs (issue 17, AR decode at batch 1), on the device:

    python -m measure.ops.tune_gemv -o OUT.json [--m 1] [--budget-s 200]

Each kernel alone under a CUDA graph (campaign timing), over (BLOCK_N, BLOCK_K, warps): the
two-launch MoE GEMV's gate_up (+gelu*up) and down (+top-k sum) kernels at one token (8 routed rows
over the full expert set, bf16 and fp8 w8a16), and the dense GEMV (triton_kernels.fused.gemv) at the QKV
(2816 -> 8192) and O (4096 -> 2816) shapes. Prints the fastest configs per kernel and writes all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch

from measure.ops.kernels import Bench, _moe_inputs, _moe_weights, _randn, _weight_copies
from measure.ops.timing import graph_ms, quick_ms


def _time(run, dev, copies=1) -> float:
    b = Bench(run, copies)
    return graph_ms(b, dev, quick_ms(b, dev))[0]


# (BLOCK_N, BLOCK_K, warps) tried per kernel
UP_CFGS = [c for c in itertools.product((2, 4, 8, 16), (512, 1024, 2048, 4096), (4, 8)) if c[0] * c[1] <= 32768]
DOWN_CFGS = [c for c in itertools.product((2, 4, 8, 16, 32), (256, 512, 1024), (4, 8)) if c[0] * c[1] <= 16384]
DENSE_CFGS = UP_CFGS


def _sweep(results: dict, key: str, cfgs, run_of, dev, deadline: float, copies: int = 1) -> None:
    """Time `run_of(cfg)` for each config until the deadline; a config that fails records its error."""
    for c in cfgs:
        if time.time() > deadline:
            return
        try:
            results[f"{key}:{c}"] = _time(run_of(c), dev, copies)
        except Exception as ex:  # noqa: BLE001 - an unsupported tile is a result of the sweep
            results[f"{key}:{c}"] = type(ex).__name__


def _tune_moe(p: dict, dev, w8: bool, results: dict, deadline: float) -> None:
    """The two-launch MoE GEMV's kernels: gate_up (+gelu*up) and down (+top-k sum)."""
    from measure.ops.triton_kernels.fused import moe_gemv_down, moe_gemv_gate_up

    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, w8)
    idf = ids.reshape(-1).to(torch.int32).contiguous()
    twf = tw.reshape(-1).contiguous()
    act = torch.empty(m * topk, f, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    tag = "fp8" if w8 else "bf16"
    _sweep(results, f"{tag}:moe_up", UP_CFGS, lambda c: lambda i: moe_gemv_gate_up(x, w1, act, idf, a_div=topk, w_scale=s1, block_n=c[0],
                                                                                block_k=c[1], num_warps=c[2]), dev, deadline)
    _sweep(results, f"{tag}:moe_down", DOWN_CFGS, lambda c: lambda i: moe_gemv_down(act, w2, out, idf, twf, topk=topk, w_scale=s2,
                                                                                 block_n=c[0], block_k=c[1], num_warps=c[2]), dev, deadline)


def _tune_dense(m: int, dev, w8: bool, results: dict, deadline: float) -> None:
    """The dense GEMV (triton_kernels.fused.gemv) at the QKV and O shapes, over weight copies (no L2 reuse)."""
    from measure.ops.triton_kernels.fused import gemv

    tag = "fp8" if w8 else "bf16"
    for name, k, n in (("qkv", 2816, 8192), ("o", 4096, 2816)):
        cp, ws, ss = _weight_copies(dev, (n, k), w8)
        xx = _randn(m, k, device=dev)
        y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        _sweep(results, f"{tag}:{name}", DENSE_CFGS, lambda c: lambda i: gemv(xx, ws[i % cp], y, ss[i % cp] if w8 else None, block_n=c[0],
                                                                             block_k=c[1], num_warps=c[2]), dev, deadline, cp)


def _print_fastest(results: dict) -> None:
    groups: dict = {}
    for k, v in results.items():
        if isinstance(v, float):
            g = ":".join(k.split(":")[:2])
            groups.setdefault(g, []).append((v, k.split(":")[2]))
    for g, vs in groups.items():
        vs.sort()
        print(f"{g:14s} " + "  ".join(f"{c} {v * 1e3:.1f}us" for v, c in vs[:4]) + f"   (of {len(vs)})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=200)
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    t0 = time.time()
    res: dict = {"gpu": torch.cuda.get_device_name(dev), "m": a.m, "results": {}}
    p = {"m": a.m, "d": 2816, "experts": 128, "ffn": 704, "topk": 8}
    for w8 in (True, False):
        _tune_moe(p, dev, w8, res["results"], t0 + a.budget_s)
        _tune_dense(a.m, dev, w8, res["results"], t0 + a.budget_s)
        torch.cuda.empty_cache()
    res["wall_s"] = round(time.time() - t0, 1)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)
    _print_fastest(res["results"])
    print(f"wall {res['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
