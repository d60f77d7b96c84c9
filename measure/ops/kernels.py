"""Kernel registry: for each op family, candidate kernels in order of preference. Each candidate
builds a `Bench` for one op at one shape (its own weights, inputs and outputs on the device); the
campaign times every candidate that builds and runs, keeps the fastest, and records every one that
failed with its error (a fallback is never silent).

Families (params in brackets; `m` = tokens in the op):
- gemm [k, n, m]: y = x @ W.T. bf16: cuBLAS (torch.mm). fp8: e4m3 weights with per-output-channel
  scales, activations quantised per token at run time (amax -> scale -> cast, counted in the op),
  `torch._scaled_mm` rowwise (cuBLASLt); tensorwise scales; last resort the bf16 GEMM on dequantised
  weights.
- lm_head [k, n=vocab, m]: the gemm plus the final-logit softcap tanh(x/30)*30 into fp32 logits.
- rmsnorm [d, m]: fused residual add + RMSNorm (Triton), or torch's eager composite.
- act_mul [d, m]: gelu_tanh(gate) * up (Triton fused, or torch eager).
- qk_norm_rope [nq, nkv, hd, m]: per-head RMSNorm of q and k plus rotary embedding (torch eager).
- router [m]: RMSNorm + 2816x128 GEMM + fp32 softmax + top-8 + renormalise (bf16 in both precisions).
- moe [m]: the routed experts of one layer for m tokens x top-8 (align/sort, gate_up GEMM, gelu*up,
  down GEMM with the routing weights, combine). Triton fused-MoE (several tile configs) or
  `torch._grouped_mm`; fp8: the Triton kernel in fp8 (per-channel weight scales, per-row dynamic
  activation scales) or `torch._scaled_grouped_mm`; last resort the bf16 path.
- attn [nq, nkv, hd, seqs, q, ctx, mask, window]: SDPA over the visible keys with cuDNN, flash or
  memory-efficient backends (GQA through enable_gqa; causal with a cached prefix through a
  lower-right causal bias; a sliding window by restricting keys to the window, in query blocks of
  one window for long causal chunks); math only as a last resort.
- embed [m]: embedding gather.  dg_sampler [m]: DiffusionGemma's sampler over fp32 logits
  (temperature, softmax, entropy, argmax, exponential-race sample, accept the lowest-entropy
  positions per 256-token canvas, re-noise the rest, keep bf16 probabilities for self-conditioning).
  ar_sampler [m]: temperature + softmax + exponential-race sample per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

FP8_MAX = 448.0
VOCAB_CHUNK = 4096  # logits-sized ops are run in chunks of this many tokens (timed up to one chunk)


def has_triton(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        import triton  # noqa: F401

        from measure.ops.triton_kernels import basic  # noqa: F401
        return True
    except Exception:
        return False


def fp8_dtype():
    return getattr(torch, "float8_e4m3fn", None)


@dataclass
class Bench:
    """One op at one shape: `run(i)` executes it once with weight copy i % copies."""

    run: Callable[[int], object]
    copies: int = 1
    detail: str = ""


@dataclass(frozen=True)
class Candidate:
    name: str
    build: Callable  # (params: dict, precision: str, device) -> Bench
    precisions: tuple[str, ...] = ("bf16", "fp8")


def _copies(weight_bytes: float, want_bytes: float = 256e6, cap: int = 30) -> int:
    """Weight copies to rotate through so back-to-back calls stream from memory, not L2 (as the 30
    layers of a real forward do)."""
    if weight_bytes <= 0:
        return 1
    return int(max(1, min(cap, math.ceil(want_bytes / weight_bytes))))


def _randn(*shape, device, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype)


def quant_rows(x: torch.Tensor):
    """Dynamic per-row e4m3 quantisation: (fp8 tensor, float32 scale [rows, 1])."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-6)
    scale = amax / FP8_MAX
    return (x.float() / scale).to(fp8_dtype()), scale


def quant_rows_fast(x: torch.Tensor):
    """Per-row quantisation in one Triton kernel on CUDA (what serving engines fuse), else torch."""
    if has_triton(x.device):
        from measure.ops.triton_kernels.basic import quant_rows as tq

        return tq(x.contiguous())
    return quant_rows(x)


def quant_weight_channels(w: torch.Tensor):
    """Per-output-channel e4m3 weights: w [..., n, k] -> (fp8 [..., n, k], float32 scale [..., n])."""
    amax = w.abs().amax(dim=-1).float().clamp(min=1e-6)
    scale = amax / FP8_MAX
    return (w.float() / scale[..., None]).to(fp8_dtype()), scale


# ---- gemm ------------------------------------------------------------------------------------------
def _softcap_fn(dev, fused: bool):
    """The final-logit softcap: torch ops (cast, divide, tanh, scale) or one Triton launch."""
    if fused:
        if not has_triton(dev):
            raise RuntimeError("Triton is not available on this device")
        from measure.ops.triton_kernels.fused import softcap

        return lambda y, logits, cap: softcap(y, logits, cap)

    def torch_cap(y, logits, cap):
        torch.tanh(y.float().div_(cap), out=logits)
        return logits.mul_(cap)
    return torch_cap


def _gemm_bf16(p, prec, dev, softcap=None, fused_cap=False):
    k, n, m = p["k"], p["n"], p["m"]
    c = _copies(k * n * 2)
    ws = [_randn(n, k, device=dev, scale=k ** -0.5) for _ in range(c)]
    x = _randn(m, k, device=dev)
    out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    logits = torch.empty(m, n, device=dev, dtype=torch.float32) if softcap else None

    cap = _softcap_fn(dev, fused_cap) if softcap else None

    def run(i):
        torch.mm(x, ws[i % c].t(), out=out)
        return cap(out, logits, softcap) if softcap else out
    return Bench(run, c, "cuBLAS bf16 mm" + ((" + Triton softcap fp32" if fused_cap else " + softcap fp32") if softcap else ""))


def _gemm_fp8(p, prec, dev, rowwise=True, softcap=None, fused_cap=False):
    if prec != "fp8":
        raise ValueError("fp8 kernel at a non-fp8 precision")
    if dev.type != "cuda":
        raise RuntimeError("torch._scaled_mm needs a CUDA device")
    k, n, m = p["k"], p["n"], p["m"]
    c = _copies(k * n)
    ws, ss = [], []
    for _ in range(c):
        wq, s = quant_weight_channels(_randn(n, k, device=dev, scale=k ** -0.5))
        ws.append(wq)  # [n, k] row-major: .t() is the column-major B _scaled_mm wants
        ss.append(s.view(1, n) if rowwise else s.max().view(()))
    x = _randn(m, k, device=dev)
    logits = torch.empty(m, n, device=dev, dtype=torch.float32) if softcap else None

    def run(i):
        if rowwise:
            xq, xs = quant_rows_fast(x)
        else:
            amax = x.abs().amax().float().clamp(min=1e-6)
            xs = (amax / FP8_MAX)
            xq = (x.float() / xs).to(fp8_dtype())
        y = torch._scaled_mm(xq, ws[i % c].t(), scale_a=xs, scale_b=ss[i % c], out_dtype=torch.bfloat16)
        return cap(y, logits, softcap) if softcap else y
    cap = _softcap_fn(dev, fused_cap) if softcap else None
    run(0)  # fail here, at build, if the layout/scales are refused
    return Bench(run, c, ("cuBLASLt fp8 rowwise" if rowwise else "cuBLASLt fp8 tensorwise") + " + dynamic act quant"
                 + (" + Triton softcap" if fused_cap and softcap else ""))


def _gemm_dequant(p, prec, dev, softcap=None):
    """Last resort for fp8: weights kept as e4m3 + scale, dequantised to bf16 per call, bf16 mm."""
    k, n, m = p["k"], p["n"], p["m"]
    c = _copies(k * n)
    f8 = fp8_dtype()
    ws, ss = [], []
    for _ in range(c):
        w = _randn(n, k, device=dev, scale=k ** -0.5)
        if f8 is not None:
            wq, s = quant_weight_channels(w)
        else:
            wq, s = w, torch.ones(n, device=dev)
        ws.append(wq)
        ss.append(s)
    x = _randn(m, k, device=dev)
    logits = torch.empty(m, n, device=dev, dtype=torch.float32) if softcap else None

    def run(i):
        w = (ws[i % c].to(torch.bfloat16) * ss[i % c][:, None].to(torch.bfloat16))
        y = x @ w.t()
        if softcap:
            torch.tanh(y.float().div_(softcap), out=logits)
            logits.mul_(softcap)
        return y
    return Bench(run, c, "dequantise fp8 -> bf16 mm (fallback)")


def _gemv_inputs(p: dict, dev, max_m: int, what: str, w8a16: bool, lead: tuple = ()) -> tuple:
    """What a Triton GEMV candidate runs on: (k, n, m, copies, weights, scales, x). Weights of shape
    lead + (n, k), several copies so timed runs read cold weights; with w8a16 their fp8 form and
    per-channel scales. Raises (the campaign falls back) without Triton or above max_m rows."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    if p["m"] > max_m:
        raise RuntimeError(f"{what} candidate is for m <= {max_m}")
    k, n, m = p["k"], p["n"], p["m"]
    c, ws, ss = _weight_copies(dev, (*lead, n, k), w8a16)
    return k, n, m, c, ws, ss, _randn(m, k, device=dev)


def _weight_copies(dev, shape: tuple, quant: bool) -> tuple[int, list, list]:
    """(copies, weights, scales): enough random copies of one weight [..., n, k] that timed runs read
    cold weights; quantised, their e4m3 form and contiguous per-channel scales (else no scales)."""
    k, n = shape[-1], shape[-2]
    c = _copies(k * n * (1 if quant else 2))
    ws, ss = [], []
    for _ in range(c):
        w = _randn(*shape, device=dev, scale=k ** -0.5)
        if quant:
            w, s_ = quant_weight_channels(w)
            ss.append(s_.contiguous())
        ws.append(w)
    return c, ws, ss


def _gemm_gemv(p, prec, dev, w8a16=False):
    """Triton GEMV (the MoE GEMV kernel with one expert) for m <= 16: bf16, or fp8 weights with bf16
    activations (w8a16: no activation quantisation)."""
    k, n, m, c, ws, ss, x = _gemv_inputs(p, dev, 16, "GEMV", w8a16, lead=(1,))
    from measure.ops.triton_kernels.basic import moe_gemv

    out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    ids = torch.zeros(m, device=dev, dtype=torch.int32)
    run = lambda i: moe_gemv(x, ws[i % c], out, ids, a_div=1, w_scale=ss[i % c] if w8a16 else None)  # noqa: E731
    run(0)
    return Bench(run, c, f"Triton GEMV {'fp8 w8a16' if w8a16 else 'bf16'} (m <= 16)")


def _gemm_gemv2(p, prec, dev, cfg, w8a16=False, pdl=False, softcap: float = 0.0):
    """Triton GEMV for m <= 8 (triton_kernels.fused.gemv): narrow column blocks, long K tiles, so that every SM
    streams weights; bf16, or fp8 weights + per-channel scales with bf16 activations (no activation
    quantisation kernel); softcap: the lm_head's, in the epilogue, into fp32 logits."""
    k, n, m, c, ws, ss, x = _gemv_inputs(p, dev, 8, "GEMV2", w8a16)
    from measure.ops.triton_kernels.fused import gemv

    y = torch.empty(m, n, device=dev, dtype=torch.float32 if softcap else torch.bfloat16)
    bn, bk, nw = cfg
    run = lambda i: gemv(x, ws[i % c], y, ss[i % c] if w8a16 else None, block_n=bn, block_k=bk, num_warps=nw, pdl=pdl,  # noqa: E731
                         softcap=softcap)
    run(0)
    return Bench(run, c, f"Triton GEMV2 {'fp8 w8a16' if w8a16 else 'bf16'} BLOCK_N/K {bn}/{bk} warps {nw} (m <= 8)"
                 + (", programmatic dependent launch (first weight tile before the wait)" if pdl else "")
                 + (", softcap in the epilogue (fp32 logits)" if softcap else ""))


def gemv2_candidates(m: int, precision: str, softcap: float = 0.0) -> list[Candidate]:
    """The GEMV2 configs for m rows (none above 8), named by config so the table says which ran;
    softcap: the lm_head's variants (`..._softcap[cfg]`)."""
    if m > 8:
        return []
    from measure.ops.triton_kernels.configs import gemv_configs

    w8 = precision == "fp8"
    cap = "_softcap" if softcap else ""
    return [Candidate(f"triton_gemv2_{'w8a16' if w8 else 'bf16'}{'_pdl' if pdl else ''}{cap}[{'/'.join(map(str, c))}]",
                      (lambda cfg, pdl: lambda pp, pr, d: _gemm_gemv2(pp, pr, d, cfg, w8, pdl, softcap))(c, pdl), (precision,))
            for pdl in (False, True) for c in gemv_configs(m)]


GEMM = {
    "bf16": [Candidate("cublas_bf16", _gemm_bf16, ("bf16",)), Candidate("triton_gemv_bf16", _gemm_gemv, ("bf16",))],
    "fp8": [Candidate("scaled_mm_rowwise", lambda p, pr, d: _gemm_fp8(p, pr, d, True), ("fp8",)),
            Candidate("triton_gemv_w8a16", lambda p, pr, d: _gemm_gemv(p, pr, d, True), ("fp8",)),
            Candidate("dequant_bf16_mm", _gemm_dequant, ("fp8",))],
}
def _gemm_act_fused(p, prec, dev, cfg, pdl=False):
    """Dense MLP gate_up for m <= 8 with gelu(gate) * up in the epilogue (the two-launch MoE GEMV's
    first kernel with one expert): one launch, the intermediate never written."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    if p["m"] > 8:
        raise RuntimeError("the fused gate_up GEMV is for m <= 8")
    from measure.ops.triton_kernels.fused import moe_gemv_gate_up

    k, f, m, w8 = p["k"], p["f"], p["m"], prec == "fp8"
    c, ws, ss = _weight_copies(dev, (1, 2 * f, k), w8)
    x = _randn(m, k, device=dev)
    act = torch.empty(m, f, device=dev, dtype=torch.bfloat16)
    ids = torch.zeros(m, device=dev, dtype=torch.int32)
    bn, bk, nw = cfg
    run = lambda i: moe_gemv_gate_up(x, ws[i % c], act, ids, a_div=1, w_scale=ss[i % c] if w8 else None,  # noqa: E731
                                     block_n=bn, block_k=bk, num_warps=nw, pdl=pdl)
    run(0)
    return Bench(run, c, f"Triton gate_up GEMV {'fp8 w8a16 ' if w8 else ''}with gelu*up epilogue, BLOCK_N/K {bn}/{bk} (m <= 8)"
                 + (", programmatic dependent launch" if pdl else ""))


def _gemm_act_unfused(p, prec, dev, cand: Candidate):
    """A GEMM candidate for gate_up (n = 2f), then gelu*up in its own launch (Triton, or torch)."""
    k, f, m = p["k"], p["f"], p["m"]
    b = cand.build({"k": k, "n": 2 * f, "m": m}, prec, dev)
    act = torch.empty(m, f, device=dev, dtype=torch.bfloat16)
    if has_triton(dev):
        from measure.ops.triton_kernels.basic import gelu_mul

        run = lambda i: gelu_mul(b.run(i), act)  # noqa: E731
    else:
        def run(i):
            y = b.run(i)
            return F.gelu(y[:, :f], approximate="tanh") * y[:, f:]
    run(0)
    return Bench(run, b.copies, b.detail + " + gelu*up")


def gemm_act_candidates(p: dict, precision: str) -> list[Candidate]:
    """gate_up GEMM + gelu*up: fused GEMV configs (m <= 8), then every GEMM candidate + gelu*up."""
    w8 = precision == "fp8"
    fused = [Candidate(f"triton_gemv_gate_up_act{'_w8a16' if w8 else ''}{'_pdl' if pdl else ''}[{'/'.join(map(str, c))}]",
                       (lambda cfg, pdl: lambda pp, pr, d: _gemm_act_fused(pp, pr, d, cfg, pdl))(c, pdl), (precision,))
             for pdl in (False, True) for c in ((4, 2048, 4), (8, 1024, 4), (16, 512, 4), (4, 4096, 4))] if p.get("m", 1 << 30) <= 8 else []
    gemms = candidates("gemm", {"m": p.get("m", 1 << 30)}, precision)
    return fused + [Candidate(f"{c.name}+gelu_mul", (lambda cc: lambda pp, pr, d: _gemm_act_unfused(pp, pr, d, cc))(c), c.precisions)
                    for c in gemms]


LM_HEAD = {
    "bf16": [Candidate("cublas_bf16+triton_softcap", lambda p, pr, d: _gemm_bf16(p, pr, d, softcap=30.0, fused_cap=True), ("bf16",)),
             Candidate("cublas_bf16+softcap", lambda p, pr, d: _gemm_bf16(p, pr, d, softcap=30.0), ("bf16",))],
    "fp8": [Candidate("scaled_mm_rowwise+triton_softcap", lambda p, pr, d: _gemm_fp8(p, pr, d, True, softcap=30.0, fused_cap=True), ("fp8",)),
            Candidate("scaled_mm_rowwise+softcap", lambda p, pr, d: _gemm_fp8(p, pr, d, True, softcap=30.0), ("fp8",)),
            Candidate("dequant_bf16_mm+softcap", lambda p, pr, d: _gemm_dequant(p, pr, d, softcap=30.0), ("fp8",))],
}


# ---- norms and elementwise -------------------------------------------------------------------------
def _rmsnorm_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import add_rmsnorm

    d, m = p["d"], p["m"]
    x, res, out = _randn(m, d, device=dev), _randn(m, d, device=dev), torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    w = _randn(d, device=dev, scale=0.1)
    return Bench(lambda i: add_rmsnorm(x, res, w, out), 1, "Triton fused add + RMSNorm")


def _rmsnorm_torch(p, prec, dev):
    d, m = p["d"], p["m"]
    x, res = _randn(m, d, device=dev), _randn(m, d, device=dev)
    w = _randn(d, device=dev, scale=0.1)

    def run(i):
        h = x.float() + res.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())).to(torch.bfloat16)
    return Bench(run, 1, "torch eager add + RMSNorm (several kernels)")


def _norm_inputs(p, dev):
    d, m, ins, outs = p["d"], p["m"], p["ins"], p["outs"]
    t = {"a": _randn(m, d, device=dev), "res": _randn(m, d, device=dev), "o1": torch.empty(m, d, device=dev, dtype=torch.bfloat16)}
    for k in ("wa", "wo1") + (("wb", "ws") if ins == 2 else ()) + (("wo2",) if outs == 2 else ()):
        t[k] = _randn(d, device=dev, scale=0.1)
    if ins == 2:
        t["b"] = _randn(m, d, device=dev)
    if outs == 2:
        t["o2"] = torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    return t


def _norm_fused_triton(p, prec, dev, pdl=False):
    """The norms between two blocks of a layer in one row pass (triton_kernels.fused.norm_fused)."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import norm_fused

    t = _norm_inputs(p, dev)
    run = lambda i: norm_fused(t["a"], t["res"], t["wa"], t["wo1"], t["o1"], t.get("b"), t.get("wb"), t.get("ws"), t.get("wo2"), t.get("o2"), pdl=pdl)  # noqa: E731
    run(0)
    return Bench(run, 1, f"Triton fused norms: {p['ins']} input norm(s){' + sum norm' if p['ins'] == 2 else ''}, residual add, {p['outs']} output norm(s)"
                 + (", programmatic dependent launch" if pdl else ""))


def norms_covered(p: dict) -> int:
    """How many RMSNorms a norm_fused op stands for (what the unfused path runs one kernel each)."""
    return p["ins"] + (1 if p["ins"] == 2 else 0) + p["outs"]


def _norm_separate_triton(p, prec, dev):
    """The same norms one fused add+RMSNorm kernel each (the first campaign's composition)."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import add_rmsnorm

    d, m, k = p["d"], p["m"], norms_covered(p)
    x, res, out = _randn(m, d, device=dev), _randn(m, d, device=dev), torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    w = _randn(d, device=dev, scale=0.1)

    def run(i):
        for _ in range(k):
            add_rmsnorm(x, res, w, out)
    return Bench(run, 1, f"{k} x Triton add + RMSNorm (unfused)")


def _norm_separate_torch(p, prec, dev):
    t = _norm_inputs(p, dev)

    def nrm(x, w):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())

    def run(i):
        y = nrm(t["a"], t["wa"])
        if p["ins"] == 2:
            y = nrm(y + nrm(t["b"], t["wb"]), t["ws"])
        h = t["res"].float() + y
        t["res"].copy_(h)
        t["o1"].copy_(nrm(h, t["wo1"]))
        if p["outs"] == 2:
            t["o2"].copy_(nrm(h, t["wo2"]))
    return Bench(run, 1, "torch eager norms (several kernels)")


def _act_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import gelu_mul

    d, m = p["d"], p["m"]
    gu, out = _randn(m, 2 * d, device=dev), torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    return Bench(lambda i: gelu_mul(gu, out), 1, "Triton fused gelu_tanh * up")


def _act_torch(p, prec, dev):
    d, m = p["d"], p["m"]
    gu = _randn(m, 2 * d, device=dev)
    return Bench(lambda i: F.gelu(gu[:, :d], approximate="tanh") * gu[:, d:], 1, "torch eager gelu_tanh * up")


def _qk_inputs(p, dev):
    """q and k (None for a layer without its own keys) of m tokens, and their positions."""
    nq, nkv, hd, m = p["nq"], p["nkv"], p["hd"], p["m"]
    q = _randn(m, nq, hd, device=dev)
    k = _randn(m, nkv, hd, device=dev) if nkv else None
    return q, k, torch.arange(m, device=dev, dtype=torch.int32)


def _qk_norm_rope(p, prec, dev):
    hd, m = p["hd"], p["m"]
    q, k, _ = _qk_inputs(p, dev)
    wq = _randn(hd, device=dev, scale=0.1)
    cos = _randn(m, 1, hd // 2, device=dev)
    sin = _randn(m, 1, hd // 2, device=dev)

    def norm_rope(t):
        t = t.float()
        t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + wq.float())
        a, b = t[..., : hd // 2], t[..., hd // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(torch.bfloat16)

    def run(i):
        norm_rope(q)
        if k is not None:
            norm_rope(k)
    return Bench(run, 1, "torch eager per-head RMSNorm + RoPE of q and k")


def _router(p, prec, dev):
    m, d, e, topk = p["m"], p["d"], p["experts"], p["topk"]
    c = _copies(d * e * 2)
    ws = [_randn(e, d, device=dev, scale=d ** -0.5) for _ in range(c)]
    x = _randn(m, d, device=dev)

    def run(i):
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
        probs = torch.softmax(h @ ws[i % c].t(), dim=-1, dtype=torch.float32)
        w, idx = torch.topk(probs, topk, dim=-1)
        return w / w.sum(-1, keepdim=True), idx
    return Bench(run, c, "torch: RMSNorm + bf16 GEMM + fp32 softmax + topk")


def _router_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import router_topk

    m, d, e, topk = p["m"], p["d"], p["experts"], p["topk"]
    c = _copies(d * e * 2)
    ws = [_randn(e, d, device=dev, scale=d ** -0.5) for _ in range(c)]  # router scale vector folded in
    x = _randn(m, d, device=dev)
    logits = torch.empty(m, e, device=dev, dtype=torch.bfloat16)
    w_out = torch.empty(m, topk, device=dev, dtype=torch.float32)
    id_out = torch.empty(m, topk, device=dev, dtype=torch.int32)

    def run(i):
        torch.mm(x, ws[i % c].t(), out=logits)
        router_topk(x, logits, topk, w_out, id_out)
    return Bench(run, c, "cuBLAS GEMM (norm scale folded into weights) + Triton fused RMS factor/softmax/top-k/renormalise")


def _router_inputs(p, dev, what: str):
    """A few tokens' router inputs for the GEMV routers: (weight copies, weights, x, top-k weight
    and id outputs); m <= 8 and Triton required."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    if p["m"] > 8:
        raise RuntimeError(f"{what} is for m <= 8")
    m, d, e, topk = p["m"], p["d"], p["experts"], p["topk"]
    c = _copies(d * e * 2)
    ws = [_randn(e, d, device=dev, scale=d ** -0.5) for _ in range(c)]
    x = _randn(m, d, device=dev)
    return (c, ws, x, torch.empty(m, topk, device=dev, dtype=torch.float32), torch.empty(m, topk, device=dev, dtype=torch.int32))


def _router_gemv(p, prec, dev, cfg=(1, 4096, 4)):
    """Few tokens: the router GEMM as the Triton GEMV (a program per expert row or two) + the fused
    top-k kernel."""
    c, ws, x, w_out, id_out = _router_inputs(p, dev, "the GEMV router")
    from measure.ops.triton_kernels.fused import gemv
    from measure.ops.triton_kernels.basic import router_topk

    logits = torch.empty(p["m"], p["experts"], device=dev, dtype=torch.bfloat16)

    def run(i):
        gemv(x, ws[i % c], logits, block_n=cfg[0], block_k=cfg[1], num_warps=cfg[2])
        router_topk(x, logits, p["topk"], w_out, id_out)
    run(0)
    return Bench(run, c, f"Triton GEMV router logits (BLOCK_N/K {cfg[0]}/{cfg[1]}) + Triton fused RMS factor/softmax/top-k")


def _router_1launch(p, prec, dev, cfg=(2, 1024, 4), pdl=False):
    """Few tokens: the router in one launch (triton_kernels.fused.router_gemv_topk): GEMV programs over
    expert blocks, the last one to finish does the RMS factor, softmax, top-k and renormalisation."""
    c, ws_, x, w_out, id_out = _router_inputs(p, dev, "the one-launch GEMV router")
    from measure.ops.triton_kernels.fused import router_gemv_topk

    scratch: dict = {}
    run = lambda i: router_gemv_topk(x, ws_[i % c], w_out, id_out, scratch, block_n=cfg[0], block_k=cfg[1], num_warps=cfg[2], pdl=pdl)  # noqa: E731
    run(0)
    return Bench(run, c, f"Triton router in one launch: GEMV BLOCK_N/K {cfg[0]}/{cfg[1]}, last program does RMS/softmax/top-k"
                 + (", programmatic dependent launch" if pdl else ""))


def _router_dot(p, prec, dev, cfg=(16, 64, 4)):
    """The router in one launch for any m (triton_kernels.fused.router_dot_topk): tensor-core logits for
    BLOCK_M tokens x all experts, RMS factor from the same x tiles, softmax/top-k in registers."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import router_dot_topk

    m, d, e, topk = p["m"], p["d"], p["experts"], p["topk"]
    c = _copies(d * e * 2)
    ws_ = [_randn(e, d, device=dev, scale=d ** -0.5) for _ in range(c)]
    x = _randn(m, d, device=dev)
    w_out = torch.empty(m, topk, device=dev, dtype=torch.float32)
    id_out = torch.empty(m, topk, device=dev, dtype=torch.int32)
    run = lambda i: router_dot_topk(x, ws_[i % c], w_out, id_out, block_m=cfg[0], block_k=cfg[1], num_warps=cfg[2])  # noqa: E731
    run(0)
    return Bench(run, c, f"Triton router in one launch: dot BLOCK_M/K {cfg[0]}/{cfg[1]}, RMS/softmax/top-k epilogue")


ROUTER_1L_CFGS = ((2, 1024, 4), (1, 2048, 4), (4, 512, 4))
ROUTER_DOT_CFGS = ((16, 64, 4), (32, 64, 4), (64, 64, 4), (16, 128, 4))


def router_candidates(m: int) -> list[Candidate]:
    one = [Candidate(f"triton_router_1launch{'_pdl' if pdl else ''}[{'/'.join(map(str, c))}]",
                     (lambda cfg, pdl: lambda pp, pr, d: _router_1launch(pp, pr, d, cfg, pdl))(c, pdl))
           for pdl in (False, True) for c in ROUTER_1L_CFGS] if m <= 8 else []
    dot = [Candidate(f"triton_router_dot[{'/'.join(map(str, c))}]", (lambda cfg: lambda pp, pr, d: _router_dot(pp, pr, d, cfg))(c))
           for c in ROUTER_DOT_CFGS if c[0] <= max(16, 4 * m)]
    return one + dot + [Candidate("triton_router_gemv[1/4096/4]", _router_gemv),
                        Candidate("triton_router_gemv[2/2048/4]", lambda p, pr, d: _router_gemv(p, pr, d, (2, 2048, 4))),
                        Candidate("triton_router", _router_triton), Candidate("torch_router", _router)]


def _ar_sampler_inputs(p, dev, split: bool):
    """Logits and greedy/sample outputs for a Triton AR sampler (Triton required; split: m <= 256)."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    if split and p["m"] > 256:
        raise RuntimeError("the split sampler is for m <= 256")
    m, v = p["m"], p["vocab"]
    return (_randn(m, v, device=dev, dtype=torch.float32, scale=3.0), torch.empty(m, device=dev, dtype=torch.int32),
            torch.empty(m, device=dev, dtype=torch.int32))


def _ar_sampler_split(p, prec, dev, chunk=2048):
    """A few rows: the AR sampler split along the vocabulary over many programs + a combine launch."""
    logits, greedy, sample = _ar_sampler_inputs(p, dev, split=True)
    from measure.ops.triton_kernels.fused import sample_rows_split

    ws_: dict = {}
    return Bench(lambda i: sample_rows_split(logits, 0.7, 99 + i, greedy, sample, ws_, chunk=chunk), 1,
                 f"Triton split-row sampler (argmax + in-kernel Gumbel sample), chunks of {chunk} + combine")


def _ar_sampler_r4(p, prec, dev, split: bool):
    """The AR sampler with tl.rand4x (one Philox call per four elements): a program per row, or
    (split, m <= 256) each row over chunks of 4096 + a combine launch."""
    logits, greedy, sample = _ar_sampler_inputs(p, dev, split)
    from measure.ops.triton_kernels.fused import sample_rows_r4, sample_rows_split_r4

    ws_: dict = {}
    if split:
        return Bench(lambda i: sample_rows_split_r4(logits, 0.7, 99 + i, greedy, sample, ws_), 1,
                     "Triton split-row sampler, rand4x (argmax + Gumbel sample), chunks of 4096 + combine")
    return Bench(lambda i: sample_rows_r4(logits, 0.7, 99 + i, greedy=greedy, sample=sample, entropy=False), 1,
                 "Triton row sampler, rand4x (argmax + Gumbel sample)")


def _dg_sampler_r4(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import sample_rows_r4

    return _dg_sampler_with(sample_rows_r4, p, dev, "Triton fused row sampler with rand4x (online softmax entropy, argmax, Gumbel sample, bf16 probs)")


DG_SPLIT_CHUNKS = (4096, 8192, 16384)


def _dg_sampler_split(p, prec, dev, chunk: int):
    """The DiffusionGemma sampler with each row split over chunks (two launches; the same random
    numbers as the rand4x row sampler): a program per row leaves most SMs idle at a canvas or two."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import sample_rows_dg_split

    ws: dict = {}
    return _dg_sampler_with(lambda lg, t, seed, **kw: sample_rows_dg_split(lg, t, seed, kw["probs"], kw["ent"], kw["greedy"], kw["sample"], ws,
                                                                           chunk=chunk),
                            p, dev, f"Triton split-row sampler with rand4x, chunks of {chunk} (partials, then bf16 probs + the row's combine)")


def _qk_norm_rope_heads(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import qk_norm_rope3

    q, k, pos = _qk_inputs(p, dev)
    wq, wk = _randn(p["hd"], device=dev, scale=0.1), _randn(p["hd"], device=dev, scale=0.1)
    return Bench(lambda i: qk_norm_rope3(q, k, wq, wk, pos), 1, "Triton per-head RMSNorm + RoPE, a program per token's q or k heads")


def _embed(p, prec, dev):
    m, d, v = p["m"], p["d"], p["vocab"]
    emb = _randn(v, d, device=dev)
    ids = torch.randint(0, v, (m,), device=dev)
    return Bench(lambda i: torch.index_select(emb, 0, ids), 1, "torch index_select")


# ---- samplers --------------------------------------------------------------------------------------
def _dg_sampler(p, prec, dev):
    """DiffusionGemma's sampler for m canvas positions (canvases of 256; fewer positions: one canvas)."""
    m, v = p["m"], p["vocab"]
    canvas = min(256, m)
    nc = max(1, m // canvas)
    logits = _randn(m, v, device=dev, dtype=torch.float32, scale=3.0)
    probs_out = torch.empty(m, v, device=dev, dtype=torch.bfloat16)
    canvas_tokens = torch.randint(0, v, (nc, canvas), device=dev)

    def run(i):
        lg = logits / 0.6  # temperature schedule value of this step
        lp = torch.log_softmax(lg, dim=-1)
        pr = lp.exp()
        ent = -(pr * lp).sum(-1)  # entropy per position
        probs_out.copy_(pr)  # bf16 probabilities kept for the next step's self-conditioning
        greedy = lg.argmax(-1)
        q = torch.empty_like(pr).exponential_()
        sample = (pr / q).argmax(-1)
        e = ent.view(nc, canvas)
        se, order = torch.sort(e, dim=-1)
        cum = torch.cumsum(se, -1) - se  # sum of the others below the bound (sum - max of the accepted)
        acc_sorted = cum <= 0.1
        accept = torch.zeros_like(acc_sorted).scatter_(1, order, acc_sorted)
        noise = torch.randint_like(canvas_tokens, 0, v)
        new = torch.where(accept, sample.view(nc, canvas), noise)
        canvas_tokens.copy_(new)
        return greedy
    return Bench(run, 1, "torch: softmax/entropy/argmax/exponential-race sample over the vocabulary, sort-based accept, re-noise")


def _ar_sampler(p, prec, dev):
    m, v = p["m"], p["vocab"]
    logits = _randn(m, v, device=dev, dtype=torch.float32, scale=3.0)

    def run(i):
        pr = torch.softmax(logits / 0.7, dim=-1)
        q = torch.empty_like(pr).exponential_()
        return (pr / q).argmax(-1)
    return Bench(run, 1, "torch: temperature softmax + exponential-race sample")


def _dg_sampler_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import sample_rows

    return _dg_sampler_with(sample_rows, p, dev, "Triton fused row sampler (online softmax entropy, argmax, in-kernel Gumbel sample, bf16 probs)")


def _dg_sampler_with(sample_rows, p, dev, what: str):
    """DiffusionGemma's sampler step with a Triton row sampler (entropy, greedy, sample, bf16 probs
    per row), then torch's accept-by-entropy and re-noise of each canvas."""
    m, v = p["m"], p["vocab"]
    canvas = min(256, m)
    nc = max(1, m // canvas)
    logits = _randn(m, v, device=dev, dtype=torch.float32, scale=3.0)
    probs = torch.empty(m, v, device=dev, dtype=torch.bfloat16)
    greedy = torch.empty(m, device=dev, dtype=torch.int32)
    sample = torch.empty(m, device=dev, dtype=torch.int32)
    ent = torch.empty(m, device=dev, dtype=torch.float32)
    canvas_tokens = torch.randint(0, v, (nc, canvas), device=dev, dtype=torch.int32)

    def run(i):
        sample_rows(logits, 0.6, 1234 + i, probs=probs, ent=ent, greedy=greedy, sample=sample)
        e = ent.view(nc, canvas)
        se, order = torch.sort(e, dim=-1)
        acc_sorted = (torch.cumsum(se, -1) - se) <= 0.1
        accept = torch.zeros_like(acc_sorted).scatter_(1, order, acc_sorted)
        noise = torch.randint_like(canvas_tokens, 0, v)
        canvas_tokens.copy_(torch.where(accept, sample.view(nc, canvas), noise))
    return Bench(run, 1, what + " + torch accept/re-noise")


def _ar_sampler_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import sample_rows

    m, v = p["m"], p["vocab"]
    logits = _randn(m, v, device=dev, dtype=torch.float32, scale=3.0)
    greedy = torch.empty(m, device=dev, dtype=torch.int32)
    sample = torch.empty(m, device=dev, dtype=torch.int32)
    return Bench(lambda i: sample_rows(logits, 0.7, 99 + i, greedy=greedy, sample=sample, entropy=False), 1,
                 "Triton fused row sampler (argmax + in-kernel Gumbel sample)")


def _qk_norm_rope_triton(p, prec, dev):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import qk_norm_rope

    q, k, pos = _qk_inputs(p, dev)
    w = _randn(p["hd"], device=dev, scale=0.1)

    def run(i):
        qk_norm_rope(q, w, pos)
        if k is not None:
            qk_norm_rope(k, w, pos)
    return Bench(run, 1, "Triton fused per-head RMSNorm + RoPE (q and k)")


def _qk_norm_rope_1l(p, prec, dev, pdl=False):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import qk_norm_rope2

    q, k, pos = _qk_inputs(p, dev)
    wq, wk = _randn(p["hd"], device=dev, scale=0.1), _randn(p["hd"], device=dev, scale=0.1)
    run = lambda i: qk_norm_rope2(q, k, wq, wk, pos, pdl=pdl)  # noqa: E731
    run(0)
    return Bench(run, 1, "Triton per-head RMSNorm + RoPE of q and k in one launch" + (", programmatic dependent launch" if pdl else ""))


# ---- MoE -------------------------------------------------------------------------------------------
def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """vLLM's moe_align_block_size in graph-capturable torch ops: (sorted_ids [EM] with pad value
    R = topk_ids.numel(), expert id per BLOCK_M block, padded row count as a 1-element tensor)."""
    flat = topk_ids.reshape(-1)
    R = flat.numel()
    dev = flat.device
    EM = ((R + num_experts * (block_m - 1) + block_m - 1) // block_m) * block_m
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    cnt_start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(R, device=dev) - cnt_start[sorted_e]
    dest = pad_start[sorted_e] + rank
    sorted_ids = torch.full((EM,), R, dtype=torch.int64, device=dev).scatter_(0, dest, order)
    blocks = torch.arange(EM // block_m, device=dev) * block_m
    expert_ids = torch.searchsorted(pad_end, blocks, right=True).clamp_(max=num_experts - 1)
    return sorted_ids, expert_ids, pad_end[-1:]


def _moe_inputs(p, dev):
    m, d, e, f, topk = p["m"], p["d"], p["experts"], p["ffn"], p["topk"]
    g = torch.Generator(device="cpu").manual_seed(1234 + m)
    ids = torch.stack([torch.randperm(e, generator=g)[:topk] for _ in range(m)]).to(dev)  # uniform routing
    w = torch.rand(m, topk, generator=g).to(dev)
    w = (w / w.sum(-1, keepdim=True)).float()
    x = _randn(m, d, device=dev)
    return x, ids, w, m, d, e, f, topk


def _moe_routings(p: dict, dev, ids, quant: bool) -> list:
    """Routing sets to rotate through, the first the op's own: at a few tokens the experts one
    routing touches (8 per token, 47.6 MB in fp8 at one token) would stay in L2 across back-to-back
    calls, so calls rotate over routings touching >= 256 MB together, as 30 layers' experts do."""
    m, d, e, f, topk = p["m"], p["d"], p["experts"], p["ffn"], p["topk"]
    touched = min(m * topk, e) * 3 * d * f * (1 if quant else 2)
    n = int(min(16, max(1, math.ceil(256e6 / touched))))
    g = torch.Generator(device="cpu").manual_seed(4321 + m)
    return [ids] + [torch.stack([torch.randperm(e, generator=g)[:topk] for _ in range(m)]).to(dev) for _ in range(n - 1)]


def _moe_triton(p, prec, dev, cfg, fp8=False, w8a16=False, cfg2=None, align="torch"):
    """cfg: the gate_up GEMM's tiles (and the down GEMM's unless cfg2); align: "torch" (moe_align,
    torch ops) or "triton" (moe_align_triton: three small kernels)."""
    if not has_triton(dev) and not p.get("_interpret"):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import fused_moe_gemm, gelu_mul, moe_align_triton

    cfg1, cfg2 = cfg, cfg2 or cfg
    align_fn = moe_align_triton if align == "triton" else moe_align

    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    bm = cfg[0]
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8 or w8a16)
    R = m * topk
    inter = torch.empty(R, 2 * f, device=dev, dtype=torch.bfloat16)
    act = torch.empty(R, f, device=dev, dtype=torch.bfloat16)
    out2 = torch.empty(R, d, device=dev, dtype=torch.bfloat16)
    twf = tw.reshape(-1).contiguous()
    sets = _moe_routings(p, dev, ids, fp8 or w8a16)

    def run(i):
        sorted_ids, expert_ids, npad = align_fn(sets[i % len(sets)], e, bm)
        if w8a16:
            fused_moe_gemm(x, w1, inter, sorted_ids, expert_ids, npad, a_div=topk, cfg=cfg1, w_scale=s1, w8a16=True)
            gelu_mul(inter, act)
            fused_moe_gemm(act, w2, out2, sorted_ids, expert_ids, npad, a_div=1, cfg=cfg2, topk_w=twf, w_scale=s2, w8a16=True)
        elif fp8:
            xq, xs = quant_rows_fast(x)
            fused_moe_gemm(xq, w1, inter, sorted_ids, expert_ids, npad, a_div=topk, cfg=cfg1, a_scale=xs.view(-1), w_scale=s1)
            gelu_mul(inter, act)
            aq, as_ = quant_rows_fast(act)
            fused_moe_gemm(aq, w2, out2, sorted_ids, expert_ids, npad, a_div=1, cfg=cfg2, topk_w=twf, a_scale=as_.view(-1), w_scale=s2)
        else:
            fused_moe_gemm(x, w1, inter, sorted_ids, expert_ids, npad, a_div=topk, cfg=cfg1)
            gelu_mul(inter, act)
            fused_moe_gemm(act, w2, out2, sorted_ids, expert_ids, npad, a_div=1, cfg=cfg2, topk_w=twf)
        return out2.view(m, topk, d).sum(1)
    tiles = "/".join(map(str, cfg1[:3])) + (f", down {'/'.join(map(str, cfg2[:3]))}" if cfg2 != cfg1 else "")
    return Bench(run, len(sets), f"Triton fused MoE {'fp8 w8a16 ' if w8a16 else 'fp8 w8a8 ' if fp8 else ''}BLOCK_M/N/K={tiles} warps {cfg1[4]} "
                         f"stages {cfg1[5]}, {align} expert alignment")


def _moe_gemv(p, prec, dev, fp8=False, cfg=(32, 256, 4), w8a16=False):
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import gelu_mul, moe_gemv

    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8)
    R = m * topk
    sets = [s_.reshape(-1).to(torch.int32).contiguous() for s_ in _moe_routings(p, dev, ids, fp8)]
    twf = tw.reshape(-1).contiguous()
    inter = torch.empty(R, 2 * f, device=dev, dtype=torch.bfloat16)
    act = torch.empty(R, f, device=dev, dtype=torch.bfloat16)
    out2 = torch.empty(R, d, device=dev, dtype=torch.bfloat16)

    def run(i):
        ids_flat = sets[i % len(sets)]
        bn, bk, nw = cfg
        if fp8 and not w8a16:
            xq, xs = quant_rows_fast(x)
            moe_gemv(xq, w1, inter, ids_flat, a_div=topk, a_scale=xs.view(-1), w_scale=s1, block_n=bn, block_k=bk, num_warps=nw)
            gelu_mul(inter, act)
            aq, as_ = quant_rows_fast(act)
            moe_gemv(aq, w2, out2, ids_flat, a_div=1, topk_w=twf, a_scale=as_.view(-1), w_scale=s2, block_n=bn, block_k=bk, num_warps=nw)
        elif fp8:
            moe_gemv(x, w1, inter, ids_flat, a_div=topk, w_scale=s1, block_n=bn, block_k=bk, num_warps=nw)
            gelu_mul(inter, act)
            moe_gemv(act, w2, out2, ids_flat, a_div=1, topk_w=twf, w_scale=s2, block_n=bn, block_k=bk, num_warps=nw)
        else:
            moe_gemv(x, w1, inter, ids_flat, a_div=topk, block_n=bn, block_k=bk, num_warps=nw)
            gelu_mul(inter, act)
            moe_gemv(act, w2, out2, ids_flat, a_div=1, topk_w=twf, block_n=bn, block_k=bk, num_warps=nw)
        return out2.view(m, topk, d).sum(1)
    mode = "(fp8 w8a16) " if (fp8 and w8a16) else "(fp8 w8a8) " if fp8 else ""
    return Bench(run, len(sets), f"Triton MoE GEMV per routed row {mode}BLOCK_N/K {cfg[0]}/{cfg[1]} warps {cfg[2]} (no sort/pad; small batches)")


def _moe_weights(dev, e: int, d: int, f: int, quant: bool):
    """Random expert weights (gate_up [e, 2f, d], down [e, d, f]) and, quantised, their e4m3 copies
    with per-channel scales (else scales None): the same draws in the same order for every MoE kernel."""
    w1 = _randn(e, 2 * f, d, device=dev, scale=d ** -0.5)
    w2 = _randn(e, d, f, device=dev, scale=f ** -0.5)
    if not quant:
        return w1, w2, None, None
    w1, s1 = quant_weight_channels(w1)
    w2, s2 = quant_weight_channels(w2)
    return w1, w2, s1.contiguous(), s2.contiguous()


def _moe_fx(p, prec, dev, cfg, cfg2, fp8=False, tma=False):
    """Fused MoE with fewer launches (triton_kernels.fused): memset; one launch counting routed rows per
    expert + quantising the activations (fp8) + filling the padded row list + zeroing the fp32
    output; one scatter launch; gate_up GEMM; gelu*up (fused with the fp8 quantisation of its output
    in fp8); down GEMM adding each routed row x its routing weight into its token's output row
    (atomics: no top-k sum kernel). Output fp32 [m, d]."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    if cfg[0] != cfg2[0]:
        raise ValueError("both GEMMs must use the alignment's BLOCK_M")
    from measure.ops.triton_kernels.fused import gelu_mul_quant, moe_prep
    from measure.ops.triton_kernels.basic import gelu_mul

    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8)
    fused_moe_gemm = _moe_gemm_fn(w1, w2, cfg, cfg2, tma)
    R = m * topk
    inter = torch.empty(R, 2 * f, device=dev, dtype=torch.bfloat16)
    act = torch.empty(R, f, device=dev, dtype=fp8_dtype() if fp8 else torch.bfloat16)
    act_s = torch.empty(R, device=dev, dtype=torch.float32)
    out = torch.empty(m, d, device=dev, dtype=torch.float32)
    twf = tw.reshape(-1).contiguous()
    ws: dict = {}
    sets = _moe_routings(p, dev, ids, fp8)

    def run(i):
        sorted_ids, eids, npad, xq, xs = moe_prep(sets[i % len(sets)], e, cfg[0], x=x if fp8 else None, out=out, ws=ws)
        if fp8:
            fused_moe_gemm(xq, w1, inter, sorted_ids, eids, npad, a_div=topk, cfg=cfg, a_scale=xs, w_scale=s1)
            gelu_mul_quant(inter, act, act_s)
            fused_moe_gemm(act, w2, out, sorted_ids, eids, npad, a_div=1, cfg=cfg2, topk_w=twf, a_scale=act_s, w_scale=s2,
                           reduce_topk=topk, num_valid_rows=R)
        else:
            fused_moe_gemm(x, w1, inter, sorted_ids, eids, npad, a_div=topk, cfg=cfg)
            gelu_mul(inter, act)
            fused_moe_gemm(act, w2, out, sorted_ids, eids, npad, a_div=1, cfg=cfg2, topk_w=twf, reduce_topk=topk, num_valid_rows=R)
        return out
    run(0)
    tiles = "/".join(map(str, cfg[:3])) + (f", down {'/'.join(map(str, cfg2[:3]))}" if cfg2 != cfg else "")
    return Bench(run, len(sets), f"Triton fused MoE{', TMA weight tiles' if tma else ''}, fused launches ({'fp8 w8a8' if fp8 else 'bf16'}) "
                         f"BLOCK_M/N/K={tiles}: prep+quant, scatter, "
                         "gate_up, gelu*up" + ("+quant" if fp8 else "") + ", down with atomic top-k sum")


def _moe_gemm_fn(w1, w2, cfg, cfg2, tma: bool):
    """The fused-MoE GEMM the fused-launch path calls: plain loads, or the weights' tiles through
    tensor descriptors (made once here, outside the timed calls)."""
    from measure.ops.triton_kernels.fused import fused_moe_gemm_tma, moe_weight_desc
    from measure.ops.triton_kernels.basic import fused_moe_gemm

    if not tma:
        return fused_moe_gemm
    descs = {id(w1): moe_weight_desc(w1, cfg[1], cfg[2]), id(w2): moe_weight_desc(w2, cfg2[1], cfg2[2])}
    return lambda a, w, *args, **kw: fused_moe_gemm_tma(a, w, descs[id(w)], *args, **kw)


def _moe_gemv2(p, prec, dev, cfg_up, cfg_down, w8a16=False, mode="plain"):
    """Small-batch MoE in two launches (triton_kernels.fused.moe_gemv2): gate_up with gelu*up in the
    epilogue, then the down projection summing each token's top-k experts; bf16 or fp8 weights with
    bf16 activations; launched as triton_kernels.fused.MOE_GEMV2_MODES[mode] says (plain, PDL, PDL with the
    down weights fetched into L2 before the down GEMV waits, or fetched by the gate_up programs)."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.fused import moe_gemv2

    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, w8a16)
    sets = [s_.reshape(-1).to(torch.int32).contiguous() for s_ in _moe_routings(p, dev, ids, w8a16)]
    twf = tw.reshape(-1).contiguous()
    act = torch.empty(m * topk, f, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m, d, device=dev, dtype=torch.bfloat16)
    run = lambda i: moe_gemv2(x, w1, w2, act, out, sets[i % len(sets)], twf, topk=topk, s1=s1, s2=s2,  # noqa: E731
                              cfg_up=cfg_up, cfg_down=cfg_down, mode=mode)
    run(0)
    how = {"plain": "", "pdl": ", programmatic dependent launch", "pf": ", gate_up asks L2 for the down weights",
           "pdlpf": ", programmatic dependent launch, the down GEMV asks L2 for its weights before it waits"}[mode]
    return Bench(run, len(sets), f"Triton MoE GEMV in 2 launches {'(fp8 w8a16) ' if w8a16 else ''}gate_up+gelu BLOCK_N/K {cfg_up[0]}/{cfg_up[1]}, "
                         f"down+top-k sum {cfg_down[0]}/{cfg_down[1]}" + how)


def _moe_vllm(p, prec, dev, fp8=False):
    """vLLM 0.32's own MoE (TritonExperts.apply): its `fused_moe_kernel` twice, launched by its
    `invoke_fused_moe_triton_kernel` with its tiles (the tuned file for this GPU, else
    get_default_config), the top-k weights applied in the down GEMM, all lifted from the vllm package
    (measure/ops/vllm_source.py). vLLM's rule picks the naive assignment (one block per token and
    expert) when tokens x top-k x 4 <= experts. Its CUDA ops are stood in for: moe_align_block_size
    by `moe_align` (torch), gelu_tanh_and_mul by the Triton `gelu_mul`, moe_sum by a torch sum,
    dynamic_per_token_scaled_fp8_quant by the Triton per-row quantisation. fp8 w8a8 with per-channel
    weight scales is the kernel `--moe-backend triton` runs. vLLM's default on sm90 for such a
    checkpoint is CUTLASS grouped GEMMs, which need vLLM's compiled extension (docs/vllm-dispatch.md)."""
    if not has_triton(dev) and not p.get("_interpret"):
        raise RuntimeError("Triton is not available on this device")
    import triton.language as tl

    from measure.ops import vllm_source
    from measure.ops.triton_kernels.basic import gelu_mul

    vm = vllm_source.lifted_module()
    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8)
    device_name = p.get("_device_name") or torch.cuda.get_device_name(dev)
    cfg, cfg_src = vllm_source.moe_config(m, e, f, d, topk, "fp8_w8a8" if fp8 else None, device_name)
    naive = m * topk * 4 <= e  # vllm fused_moe._prepare_expert_assignment
    inter = torch.empty(m, topk, 2 * f, device=dev, dtype=torch.bfloat16)
    act = torch.empty(m * topk, f, device=dev, dtype=torch.bfloat16)
    out2 = torch.empty(m, topk, d, device=dev, dtype=torch.bfloat16)
    tw = tw.contiguous()
    sets = _moe_routings(p, dev, ids, fp8)
    bm = cfg["BLOCK_SIZE_M"]

    def gemm(a, w, a_scale, w_scale, c, assign, mul, k):
        vm.invoke_fused_moe_triton_kernel(a, w, c, a_scale, w_scale, tw if mul else None, *assign, mul, k, cfg, tl.bfloat16,
                                          fp8, False, False, False, fp8)

    def run(i):
        route = sets[i % len(sets)]
        if naive:
            assign = (None, route.reshape(-1), torch.full((1,), route.numel() * bm, dtype=torch.int32, device=dev))
        else:
            assign = moe_align(route, e, bm)
        xq, xs = quant_rows_fast(x) if fp8 else (x, None)
        gemm(xq, w1, xs, s1, inter, assign, False, topk)
        gelu_mul(inter.view(m * topk, 2 * f), act)
        aq, as_ = quant_rows_fast(act) if fp8 else (act, None)
        gemm(aq, w2, as_, s2, out2, assign, True, 1)
        return out2.sum(1)
    tiles = "/".join(str(cfg[k]) for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
    return Bench(run, len(sets), f"vLLM {vm.VLLM_VERSION} fused_moe_kernel{' fp8 w8a8 (the --moe-backend triton path)' if fp8 else ''}, "
                                 f"BLOCK_M/N/K={tiles} warps {cfg.get('num_warps')} stages {cfg.get('num_stages')} from {cfg_src}, "
                                 f"{'naive' if naive else 'aligned (torch stand-in for moe_align_block_size)'} expert assignment")


def _moe_grouped(p, prec, dev, fp8=False):
    if dev.type != "cuda":
        raise RuntimeError("torch._grouped_mm needs a CUDA device")
    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, s1, s2 = _moe_weights(dev, e, d, f, fp8)
    sets = [s_.reshape(-1) for s_ in _moe_routings(p, dev, ids, fp8)]
    twf = tw.reshape(-1)

    def run(i):
        flat = sets[i % len(sets)]
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(e, dtype=torch.int32, device=dev).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        xs = x.index_select(0, order // topk)
        if fp8:
            xq, xsc = quant_rows_fast(xs)
            h = torch._scaled_grouped_mm(xq, w1.transpose(-2, -1), xsc.view(-1), s1, offs=offs, out_dtype=torch.bfloat16)
            a = F.gelu(h[:, :f], approximate="tanh") * h[:, f:]
            aq, asc = quant_rows_fast(a)
            y = torch._scaled_grouped_mm(aq, w2.transpose(-2, -1), asc.view(-1), s2, offs=offs, out_dtype=torch.bfloat16)
        else:
            h = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
            a = F.gelu(h[:, :f], approximate="tanh") * h[:, f:]
            y = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offs)
        y = y * twf[order, None].to(y.dtype)
        out = torch.zeros(m, d, device=dev, dtype=torch.float32)
        out.index_add_(0, order // topk, y.float())
        return out
    run(0)
    return Bench(run, len(sets), "torch._scaled_grouped_mm (rowwise scales)" if fp8 else "torch._grouped_mm (CUTLASS)")


def _moe_loop(p, prec, dev):
    """Last resort (any device): a loop over experts with dense GEMMs (host-synchronising)."""
    x, ids, tw, m, d, e, f, topk = _moe_inputs(p, dev)
    w1, w2, _, _ = _moe_weights(dev, e, d, f, False)

    def run(i):
        out = torch.zeros(m, d, device=dev, dtype=torch.float32)
        for ex in torch.unique(ids).tolist():
            tok, slot = (ids == ex).nonzero(as_tuple=True)
            h = x[tok] @ w1[ex].t()
            a = F.gelu(h[:, :f], approximate="tanh") * h[:, f:]
            out.index_add_(0, tok, ((a @ w2[ex].t()).float() * tw[tok, slot, None]))
        return out
    return Bench(run, 1, "torch loop over experts (fallback, not graph-capturable)")


VLLM_MOE = "vllm_fused_moe"  # vLLM's own MoE (its lifted Triton kernel; the kernel set "vllm" times it alone); an error where vLLM's source is not found


def moe_candidates(p: dict, prec: str) -> list[Candidate]:
    from measure.ops.triton_kernels import configs as cfgmod

    rpe = p["m"] * p["topk"] / p["experts"]
    fp8 = prec == "fp8"
    out = [Candidate(f"triton_fused_moe{'_fp8' if fp8 else ''}[{'/'.join(map(str, c))}]",
                     (lambda cfg: lambda pp, pr, d: _moe_triton(pp, pr, d, cfg, fp8))(c), (prec,))
           for c in cfgmod.moe_configs(rpe, fp8)]
    out += [Candidate(f"triton_fused_moe{'_fp8' if fp8 else ''}_ta[{'/'.join(map(str, c1))}|{'/'.join(map(str, c2))}]",
                      (lambda a, b: lambda pp, pr, d: _moe_triton(pp, pr, d, a, fp8, cfg2=b, align="triton"))(c1, c2), (prec,))
            for c1, c2 in cfgmod.moe_config_pairs(rpe, fp8)]
    out += [Candidate(f"triton_fused_moe{'_fp8' if fp8 else ''}_fx[{'/'.join(map(str, c1))}|{'/'.join(map(str, c2))}]",
                      (lambda a, b: lambda pp, pr, d: _moe_fx(pp, pr, d, a, b, fp8))(c1, c2), (prec,))
            for c1, c2 in cfgmod.moe_fx_pairs(rpe, fp8)]
    out += [Candidate(f"triton_fused_moe{'_fp8' if fp8 else ''}_tma[{'/'.join(map(str, c1))}|{'/'.join(map(str, c2))}]",
                      (lambda a, b: lambda pp, pr, d: _moe_fx(pp, pr, d, a, b, fp8, tma=True))(c1, c2), (prec,))
            for c1, c2 in cfgmod.moe_tma_pairs(rpe, fp8)]
    if p["m"] <= 32:
        gemv2 = [Candidate(f"triton_moe_gemv2{'_w8a16' if fp8 else ''}{'' if mode == 'plain' else '_' + mode}[{'/'.join(map(str, a))}|{'/'.join(map(str, b))}]",
                           (lambda a, b, mode: lambda pp, pr, d: _moe_gemv2(pp, pr, d, a, b, fp8, mode))(a, b, mode), (prec,))
                 for mode, cfgs in (("plain", cfgmod.moe_gemv2_configs(fp8)), ("pdl", cfgmod.moe_gemv2_configs(fp8)),
                                    ("pdlpf", cfgmod.moe_gemv2_configs(fp8, few=True)), ("pf", cfgmod.moe_gemv2_configs(fp8, few=True)))
                 for a, b in cfgs]
        out = gemv2 + out
        gemv = [Candidate(f"triton_moe_gemv{'_fp8' if fp8 else ''}[{'/'.join(map(str, c))}]",
                          (lambda cfg: lambda pp, pr, d: _moe_gemv(pp, pr, d, fp8, cfg))(c), (prec,))
                for c in ((32, 256, 4), (16, 512, 4), (64, 128, 8))]
        if fp8:
            gemv += [Candidate(f"triton_moe_gemv_w8a16[{'/'.join(map(str, c))}]",
                               (lambda cfg: lambda pp, pr, d: _moe_gemv(pp, pr, d, True, cfg, w8a16=True))(c), (prec,))
                     for c in ((32, 256, 4), (16, 512, 4))]
        out = gemv + out
    if fp8:
        out += [Candidate(f"triton_fused_moe_w8a16[{'/'.join(map(str, c))}]",
                          (lambda cfg: lambda pp, pr, d: _moe_triton(pp, pr, d, cfg, False, True))(c), (prec,))
                for c in cfgmod.moe_configs(rpe, False)]
    out.append(Candidate("scaled_grouped_mm" if fp8 else "grouped_mm", lambda pp, pr, d: _moe_grouped(pp, pr, d, fp8), (prec,)))
    if fp8:
        out.append(Candidate("grouped_mm_bf16 (fp8 fallback)", lambda pp, pr, d: _moe_grouped(pp, pr, d, False), ("fp8",)))
    out.append(Candidate("expert_loop (fallback)", _moe_loop, ("bf16", "fp8")))
    out.append(Candidate(VLLM_MOE + ("_fp8" if fp8 else ""), lambda pp, pr, d: _moe_vllm(pp, pr, d, fp8), (prec,)))
    return out


# ---- the FFN block on two streams: dense MLP beside router + experts ---------------------------------
# Every MoE layer runs the dense MLP (gate_up + gelu*up, down) beside the routed experts on the same
# normed input; serving engines (vLLM's shared-expert overlap) run the two branches concurrently on a
# second CUDA stream. The family `moe_dense` times the pair captured in one CUDA graph as a fork/join
# of two streams, each component with the kernel the committed op table chose for it at the nearest m
# (COMPONENTS, set by the campaign from data/runs/ops/<gpu>); the composition prices a layer with it
# where it is faster than the components' sum (shapes.layer_ops alternatives, compose.resolve).
COMPONENTS: dict = {"rows": None, "dir": None}
MOE_DENSE_PARTS = ("gemm_act.mlp_gate_up", "gemm.mlp_down", "router", "moe")


def set_components(folder) -> bool:
    """Load the op table whose kernel choices the moe_dense candidates use (False if none there)."""
    from pathlib import Path

    from measure.ops.table import read_rows

    rows = [r for r in read_rows(Path(folder) / "ops.csv") if r.get("ms")] if folder else []
    COMPONENTS["rows"] = rows or None
    COMPONENTS["dir"] = str(folder) if rows else None
    return bool(rows)


def _component_kernel(op: str, precision: str, m: int) -> str:
    rows = COMPONENTS["rows"]
    if not rows:
        raise RuntimeError("moe_dense needs the op table of its components (campaign --components)")
    cand = [r for r in rows if r["op"] == op and r["precision"] in (precision, "*") and r.get("m")]
    if not cand:
        raise RuntimeError(f"component {op} not in the op table {COMPONENTS['dir']}")
    best = min(cand, key=lambda r: (abs(math.log(float(r["m"])) - math.log(max(m, 1))), r["precision"] == "*"))
    return best["kernel"]


def _component_benches(p: dict, prec: str, dev) -> list:
    m, d = p["m"], p["d"]
    specs = [("gemm_act.mlp_gate_up", "gemm_act", {"k": d, "f": p["f"], "m": m}),
             ("gemm.mlp_down", "gemm", {"k": p["f"], "n": d, "m": m}),
             ("router", "router", {"d": d, "experts": p["experts"], "topk": p["topk"], "m": m}),
             ("moe", "moe", {"d": d, "experts": p["experts"], "ffn": p["ffn"], "topk": p["topk"], "m": m})]
    out = []
    for op, fam, pp in specs:
        name = _component_kernel(op, prec, m)
        c = next((c for c in candidates(fam, pp, prec) if c.name == name and prec in c.precisions), None)
        if c is None:
            raise RuntimeError(f"{op}: the table's kernel {name} is not a candidate here")
        out.append((op, name, c.build(pp, prec, dev)))
    return out


def _moe_dense(p, prec, dev, mode="moe_first"):
    """mode: moe_first / dense_first (two streams, that branch captured first) or serial (one stream)."""
    if dev.type != "cuda":
        raise RuntimeError("the two-stream FFN block is timed on CUDA only")
    parts = _component_benches(p, prec, dev)
    dense = [b for op, _, b in parts if op.startswith("gemm")]
    moe = [b for op, _, b in parts if not op.startswith("gemm")]
    side = torch.cuda.Stream(device=dev)
    copies = max(b.copies for _, _, b in parts)

    def run(i):
        if mode == "serial":
            return [b.run(i) for b in moe + dense]
        first, second = (moe, dense) if mode == "moe_first" else (dense, moe)
        cur = torch.cuda.current_stream(dev)
        side.wait_stream(cur)
        outs = [b.run(i) for b in first]
        with torch.cuda.stream(side):
            outs += [b.run(i) for b in second]
        cur.wait_stream(side)
        return outs
    run(0)
    kern = ", ".join(f"{op}: {name}" for op, name, _ in parts)
    how = "one stream (serial)" if mode == "serial" else f"two streams, {'router+MoE' if mode == 'moe_first' else 'dense MLP'} captured first"
    return Bench(run, copies, f"FFN block on {how}; {kern}")


MOE_DENSE = [Candidate("streams2_moe_first", lambda p, pr, d: _moe_dense(p, pr, d, "moe_first")),
             Candidate("streams2_dense_first", lambda p, pr, d: _moe_dense(p, pr, d, "dense_first")),
             Candidate("serial_table_kernels", lambda p, pr, d: _moe_dense(p, pr, d, "serial"))]


# ---- attention -------------------------------------------------------------------------------------
SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")


def attn_plan(q: int, ctx: int, mask: str, window: int | None):
    """(list of (query_count, key_count, lower_right_causal) blocks) that cover the op's visible keys."""
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


def _attn(p, prec, dev, backend, gqa="native"):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    nq, nkv, hd, seqs, q, ctx = p["nq"], p["nkv"], p["hd"], p["seqs"], p["q"], p["ctx"]
    mask, window, kv_shared = p["mask"], p.get("window") or None, bool(p.get("k_eq_v"))
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend]
    if backend != "math" and dev.type != "cuda":
        raise RuntimeError(f"SDPA {backend} backend needs a CUDA device")
    blocks = attn_plan(q, ctx, mask, window)
    Lmax = max(b[1] for b in blocks)
    qs = _randn(seqs, nq, q, hd, device=dev)
    k = _randn(seqs, nkv, Lmax, hd, device=dev)
    v = k if kv_shared else _randn(seqs, nkv, Lmax, hd, device=dev)
    from torch.nn.attention.bias import causal_lower_right

    group = nq // nkv
    any_mask = any(c for _, _, c in blocks)
    if gqa == "packed" and (any_mask or group == 1):
        raise RuntimeError("packed GQA needs an unmasked op (decode or a bidirectional canvas) and grouped heads")
    plans = []
    off = 0
    for nb, L, causal in blocks:
        qb = qs[:, :, off:off + nb]
        bias = causal_lower_right(nb, L) if (causal and not (nb == L)) else None
        plans.append((qb, k[:, :, Lmax - L:], v[:, :, Lmax - L:], bias, causal and nb == L))
        off += nb

    def run(i):
        with sdpa_kernel([be]):
            for qb, kb, vb, bias, is_causal in plans:
                if gqa == "packed":  # the group's query heads stacked along the query axis of their KV head (exact without a mask)
                    qp = qb.reshape(seqs, nkv, group * qb.shape[2], hd)
                    F.scaled_dot_product_attention(qp, kb, vb)
                elif gqa == "expand":  # KV heads materialised per query head (the copy is in the time)
                    ke = kb.repeat_interleave(group, dim=1)
                    ve = ke if kv_shared else vb.repeat_interleave(group, dim=1)
                    F.scaled_dot_product_attention(qb, ke, ve, attn_mask=bias, is_causal=is_causal)
                else:
                    F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, is_causal=is_causal, enable_gqa=nq != nkv)
    run(0)
    return Bench(run, 1, f"SDPA {backend}{'' if gqa == 'native' else ' GQA-' + gqa} ({len(blocks)} block{'s' if len(blocks) > 1 else ''}, keys {Lmax})")


def _packed_attn_shape(p: dict, who: str):
    """An attention op with the GQA group packed as query rows: (seqs, kv heads, group, query rows
    per sequence, keys, head dim, causal). Candidates of this layout take single-block ops only."""
    blocks = attn_plan(p["q"], p["ctx"], p["mask"], p.get("window") or None)
    if len(blocks) != 1:
        raise RuntimeError(f"{who} candidate covers single-block ops only")
    nb, L, causal = blocks[0]
    return p["seqs"], p["nkv"], p["nq"] // p["nkv"], nb, L, p["hd"], causal


def _packed_attn_inputs(p: dict, dev):
    """Packed queries [seqs * kv heads, group * rows, hd], keys and values (the keys again where K = V)."""
    seqs, nkv, g, nb, L, hd, _ = _packed_attn_shape(p, "this")
    qs = _randn(seqs * nkv, g * nb, hd, device=dev)
    k = _randn(seqs * nkv, L, hd, device=dev)
    return qs, k, k if p.get("k_eq_v") else _randn(seqs * nkv, L, hd, device=dev)


def _attn_bmm_packed(p, prec, dev):
    """GQA attention as two cuBLAS batched GEMMs per KV head with the group's query heads packed as
    rows (scores in bf16, fp32 softmax, a lower-right causal mask added where the op is causal):
    for head_dim 512, which SDPA's flash/cuDNN kernels do not take."""
    if dev.type != "cuda":
        raise RuntimeError("the packed-bmm attention candidate is timed on CUDA only")
    seqs, nkv, g, nb, L, hd, causal = _packed_attn_shape(p, "packed-bmm")
    if seqs * nkv * g * nb * L * 6 > 6e9:
        raise RuntimeError("scores would exceed 6 GB")
    qs, k, v = _packed_attn_inputs(p, dev)
    bias = None
    if causal:
        i = torch.arange(nb, device=dev)[:, None]
        j = torch.arange(L, device=dev)[None, :]
        bias = torch.where(j <= (L - nb) + i, 0.0, float("-inf")).to(torch.float32)
    scale = hd ** -0.5

    def run(it):
        sc = torch.bmm(qs, k.transpose(1, 2))
        if bias is not None:
            pr = torch.softmax(sc.view(seqs * nkv, g, nb, L).float() * scale + bias, dim=-1).to(torch.bfloat16).view(seqs * nkv, g * nb, L)
        else:
            pr = torch.softmax(sc.float() * scale, dim=-1).to(torch.bfloat16)
        return torch.bmm(pr, v)
    run(0)
    return Bench(run, 1, f"cuBLAS bmm QK^T, fp32 softmax, bmm PV, GQA packed ({'causal' if causal else 'no mask'}, keys {L})")


def _attn_flash_triton(p, prec, dev, cfg=(32, 32, 8, 2), min_keys=512, combine="torch"):
    """Triton flash attention with the GQA group packed as rows and split-KV (flash-decoding) when
    the grid would not fill the GPU: for head_dim 512, which SDPA's flash/cuDNN kernels refuse."""
    if not has_triton(dev):
        raise RuntimeError("Triton is not available on this device")
    from measure.ops.triton_kernels.basic import flash_gqa

    seqs, nkv, g, nb, L, hd, causal = _packed_attn_shape(p, "the Triton flash")
    bm, bn, nw, ns = cfg
    qs, k, v = _packed_attn_inputs(p, dev)
    progs = -(-g * nb // bm) * seqs * nkv
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    splits = max(1, min(-(-2 * sms // progs), -(-L // min_keys)))
    ws = None
    if splits > 1:  # partials' buffers made once, outside the timed calls
        rows = seqs * nkv * splits * g * nb
        ws = (torch.empty(rows, device=dev), torch.empty(rows, device=dev), torch.empty(rows * hd, device=dev))
    run = lambda i: flash_gqa(qs, k, v, nb, causal, splits=splits, block_m=bm, block_n=bn, num_warps=nw, num_stages=ns, ws=ws,  # noqa: E731
                              combine=combine)
    run(0)
    return Bench(run, 1, f"Triton flash attention, GQA packed, {splits} KV split(s) of >= {min_keys} keys ({combine} combine), "
                         f"BLOCK_M/N {bm}/{bn} ({'causal' if causal else 'no mask'}, keys {L})")


ATTN = ([Candidate(f"sdpa_{b}", (lambda b: lambda p, pr, d: _attn(p, pr, d, b))(b), ("bf16", "fp8")) for b in SDPA_BACKENDS[:3]]
        + [Candidate(f"sdpa_{b}_gqa_packed", (lambda b: lambda p, pr, d: _attn(p, pr, d, b, "packed"))(b), ("bf16", "fp8"))
           for b in ("flash", "efficient")]
        + [Candidate("triton_flash_gqa", _attn_flash_triton, ("bf16", "fp8")),
           Candidate("triton_flash_gqa_m16", lambda p, pr, d: _attn_flash_triton(p, pr, d, (16, 64, 4, 2)), ("bf16", "fp8")),
           Candidate("triton_flash_decode_m16", lambda p, pr, d: _attn_flash_triton(p, pr, d, (16, 64, 4, 2), 64, "triton"), ("bf16", "fp8")),
           Candidate("triton_flash_decode_m16n32", lambda p, pr, d: _attn_flash_triton(p, pr, d, (16, 32, 4, 2), 128, "triton"), ("bf16", "fp8")),
           Candidate("bmm_gqa_packed", _attn_bmm_packed, ("bf16", "fp8")),
           Candidate("sdpa_efficient_gqa_expand", lambda p, pr, d: _attn(p, pr, d, "efficient", "expand"), ("bf16", "fp8")),
           Candidate("sdpa_math", lambda p, pr, d: _attn(p, pr, d, "math"), ("bf16", "fp8"))])


def candidates(family: str, params: dict, precision: str) -> list[Candidate]:
    """The registry: candidates for an op family at a precision, in order of preference."""
    if family == "gemm":
        m = int(params.get("m", 1 << 30))
        return GEMM[precision] + gemv2_candidates(m, precision)
    if family == "lm_head":
        m = int(params.get("m", 1 << 30))
        return LM_HEAD[precision] + gemv2_candidates(m, precision, softcap=30.0)
    if family == "gemm_act":
        return gemm_act_candidates(params, precision)
    if family == "moe":
        return moe_candidates(params, precision)
    if family == "attn":
        return ATTN
    if family == "moe_dense":
        return MOE_DENSE
    simple = {
        "rmsnorm": [Candidate("triton_add_rmsnorm", _rmsnorm_triton), Candidate("torch_add_rmsnorm", _rmsnorm_torch)],
        "act_mul": [Candidate("triton_gelu_mul", _act_triton), Candidate("torch_gelu_mul", _act_torch)],
        "qk_norm_rope": [Candidate("triton_qk_norm_rope_heads", _qk_norm_rope_heads), Candidate("triton_qk_norm_rope_1launch", _qk_norm_rope_1l),
                         Candidate("triton_qk_norm_rope_1launch_pdl", lambda p, pr, d: _qk_norm_rope_1l(p, pr, d, True)), Candidate("triton_qk_norm_rope", _qk_norm_rope_triton),
                         Candidate("torch_qk_norm_rope", _qk_norm_rope)],
        "norm_fused": [Candidate("triton_norm_fused", _norm_fused_triton),
                       Candidate("triton_norm_fused_pdl", lambda p, pr, d: _norm_fused_triton(p, pr, d, True)), Candidate("triton_add_rmsnorm_separate", _norm_separate_triton),
                       Candidate("torch_norms_separate", _norm_separate_torch)],
        "router": router_candidates(int(params.get("m", 1 << 30))),
        "embed": [Candidate("torch_embed", _embed)],
        "dg_sampler": [Candidate("triton_dg_sampler_r4", _dg_sampler_r4)]
        + [Candidate(f"triton_dg_sampler_split_r4[{c}]", (lambda c: lambda p, pr, d: _dg_sampler_split(p, pr, d, c))(c)) for c in DG_SPLIT_CHUNKS]
        + [Candidate("triton_dg_sampler", _dg_sampler_triton), Candidate("torch_dg_sampler", _dg_sampler)],
        "ar_sampler": [Candidate("triton_ar_sampler_split_r4[4096]", lambda p, pr, d: _ar_sampler_r4(p, pr, d, True)),
                       Candidate("triton_ar_sampler_r4", lambda p, pr, d: _ar_sampler_r4(p, pr, d, False)),
                       Candidate("triton_ar_sampler_split[2048]", _ar_sampler_split),
                       Candidate("triton_ar_sampler_split[8192]", lambda p, pr, d: _ar_sampler_split(p, pr, d, 8192)),
                       Candidate("triton_ar_sampler", _ar_sampler_triton), Candidate("torch_ar_sampler", _ar_sampler)],
    }
    if family not in simple:
        raise KeyError(f"unknown op family {family!r}")
    return simple[family]
