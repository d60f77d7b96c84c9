"""Triton kernels of the operator profiler: a fused MoE GEMM (the vLLM fused_moe design: tokens
sorted by expert and padded to BLOCK_M per expert, one program per (row block, column block),
the block's expert read from `expert_ids`), a fused add+RMSNorm and a fused gelu(tanh)*up.

Imported only where Triton is installed (the device machine); `kernels.py` records a fallback when
it is not. `TRITON_INTERPRET=1` runs these on the CPU (the tests do, when Triton is installed).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _fused_moe_kernel(
    a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_w_ptr,
    sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr,
    N, K: tl.constexpr, EM, num_valid_rows,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_bse, stride_bsn,
    A_DIV: tl.constexpr, MUL_W: tl.constexpr, USE_FP8: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_in_group = GROUP_M * num_pid_n
    group_id = pid // num_in_group
    first_m = group_id * GROUP_M
    gsize = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % num_in_group) % gsize)
    pid_n = (pid % num_in_group) // gsize
    num_post = tl.load(num_post_pad_ptr)
    if pid_m * BLOCK_M >= num_post:
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    rows = tl.load(sorted_ids_ptr + offs_m)
    rmask = rows < num_valid_rows
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_rows = rows // A_DIV
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + e * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        kmask = offs_k < K - kk * BLOCK_K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if USE_FP8:
        a_s = tl.load(a_scale_ptr + a_rows, mask=rmask, other=0.0)
        b_s = tl.load(b_scale_ptr + e * stride_bse + offs_n * stride_bsn)
        acc = acc * a_s[:, None] * b_s[None, :]
    if MUL_W:
        w = tl.load(topk_w_ptr + rows, mask=rmask, other=0.0)
        acc = acc * w[:, None]
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=rmask[:, None] & (offs_cn[None, :] < N))


def fused_moe_gemm(a, w, out, sorted_ids, expert_ids, num_post, *, a_div, cfg, topk_w=None, a_scale=None, w_scale=None):
    """out[r] = a[r // a_div] @ w[e(r)].T (* scales) (* topk_w[r]) for every valid sorted row r.
    a: [rows_a, K]; w: [E, N, K]; out: [R, N]; sorted_ids: [EM] (pad value R)."""
    E, N, K = w.shape
    EM = sorted_ids.numel()
    bm, bn, bk, gm, nw, ns = cfg
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    fp8 = a_scale is not None
    dummy = out
    _fused_moe_kernel[grid](
        a, w, out, a_scale if fp8 else dummy, w_scale if fp8 else dummy, topk_w if topk_w is not None else dummy,
        sorted_ids, expert_ids, num_post,
        N, K, EM, out.shape[0],
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        w_scale.stride(0) if fp8 else 0, w_scale.stride(1) if fp8 else 0,
        A_DIV=a_div, MUL_W=topk_w is not None, USE_FP8=fp8,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_warps=nw, num_stages=ns,
    )
    return out


@triton.jit
def _add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32)
    x = x + r
    tl.store(res_ptr + row * D + offs, x.to(res_ptr.dtype.element_ty), mask=m)
    var = tl.sum(x * x, axis=0) / D
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(var + eps) * (1.0 + w)
    tl.store(out_ptr + row * D + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def add_rmsnorm(x, res, w, out, eps=1e-6):
    """res += x; out = rmsnorm(res) * (1 + w) (Gemma's scale), one pass per row."""
    M, D = x.shape
    _add_rmsnorm_kernel[(M,)](x, res, w, out, D, eps, BLOCK=triton.next_power_of_2(D), num_warps=8 if D > 2048 else 4)
    return out


@triton.jit
def _gelu_mul_kernel(gu_ptr, out_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    m = offs < D
    g = tl.load(gu_ptr + row * 2 * D + offs, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * D + D + offs, mask=m, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0  # tanh
    y = 0.5 * g * (1.0 + t) * u
    tl.store(out_ptr + row * D + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def gelu_mul(gu, out):
    """out = gelu_tanh(gu[:, :D]) * gu[:, D:] with D = out.shape[1]."""
    M, D = out.shape
    BLOCK = 1024
    _gelu_mul_kernel[(M, triton.cdiv(D, BLOCK))](gu, out, D, BLOCK=BLOCK, num_warps=4)
    return out


@triton.jit
def _quant_rows_kernel(x_ptr, q_ptr, s_ptr, K, BLOCK: tl.constexpr, NBLK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    amax = tl.zeros((BLOCK,), dtype=tl.float32)
    for b in range(NBLK):
        o = b * BLOCK + offs
        x = tl.load(x_ptr + row * K + o, mask=o < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    s = tl.maximum(tl.max(amax, axis=0), 1e-6) / 448.0
    tl.store(s_ptr + row, s)
    for b in range(NBLK):
        o = b * BLOCK + offs
        x = tl.load(x_ptr + row * K + o, mask=o < K, other=0.0).to(tl.float32)
        tl.store(q_ptr + row * K + o, (x / s).to(q_ptr.dtype.element_ty), mask=o < K)


def quant_rows(x, q=None, s=None):
    """Dynamic per-row e4m3 quantisation in one kernel: (fp8 [M, K], float32 scale [M, 1])."""
    M, K = x.shape
    q = torch.empty(M, K, device=x.device, dtype=torch.float8_e4m3fn) if q is None else q
    s = torch.empty(M, 1, device=x.device, dtype=torch.float32) if s is None else s
    BLOCK = min(4096, triton.next_power_of_2(K))
    _quant_rows_kernel[(M,)](x, q, s, K, BLOCK=BLOCK, NBLK=triton.cdiv(K, BLOCK), num_warps=8 if BLOCK >= 2048 else 4)
    return q, s


@triton.jit
def _qk_norm_rope_kernel(x_ptr, w_ptr, pos_ptr, H, HD: tl.constexpr, HALF: tl.constexpr, eps, theta_log2):
    pid = tl.program_id(0).to(tl.int64)  # one (token, head) row
    tok = pid // H
    offs = tl.arange(0, HALF)
    a = tl.load(x_ptr + pid * HD + offs).to(tl.float32)
    b = tl.load(x_ptr + pid * HD + HALF + offs).to(tl.float32)
    r = tl.rsqrt((tl.sum(a * a, axis=0) + tl.sum(b * b, axis=0)) / HD + eps)
    wa = tl.load(w_ptr + offs).to(tl.float32)
    wb = tl.load(w_ptr + HALF + offs).to(tl.float32)
    a = a * r * (1.0 + wa)
    b = b * r * (1.0 + wb)
    pos = tl.load(pos_ptr + tok).to(tl.float32)
    inv = tl.exp2(-(offs.to(tl.float32) / HALF) * theta_log2)
    ang = pos * inv
    c, s = tl.cos(ang), tl.sin(ang)
    tl.store(x_ptr + pid * HD + offs, (a * c - b * s).to(x_ptr.dtype.element_ty))
    tl.store(x_ptr + pid * HD + HALF + offs, (b * c + a * s).to(x_ptr.dtype.element_ty))


def qk_norm_rope(x, w, pos, eps=1e-6, theta=10000.0):
    """In place: per-head RMSNorm then rotary embedding of x [tokens, heads, hd]."""
    T, H, HD = x.shape
    import math
    _qk_norm_rope_kernel[(T * H,)](x, w, pos, H, HD=HD, HALF=HD // 2, eps=eps, theta_log2=math.log2(theta), num_warps=4)
    return x


@triton.jit
def _sampler_kernel(logit_ptr, probs_ptr, ent_ptr, greedy_ptr, sample_ptr, V, inv_temp, seed,
                    BLOCK: tl.constexpr, NBLK: tl.constexpr, WRITE_PROBS: tl.constexpr, ENTROPY: tl.constexpr):
    """One row: online max / sum-exp / sum-exp*x (entropy), argmax, Gumbel-max sample (random numbers
    made in-kernel), then optionally the bf16 probabilities (self-conditioning input)."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    t = tl.zeros((BLOCK,), tl.float32)
    gbest = tl.full((BLOCK,), -float("inf"), tl.float32)
    gidx = tl.zeros((BLOCK,), tl.int32)
    sbest = tl.full((BLOCK,), -float("inf"), tl.float32)
    sidx = tl.zeros((BLOCK,), tl.int32)
    for b in range(NBLK):
        o = b * BLOCK + offs
        msk = o < V
        x = tl.load(logit_ptr + row * V + o, mask=msk, other=-float("inf")).to(tl.float32) * inv_temp
        take = x > gbest
        gbest = tl.where(take, x, gbest)
        gidx = tl.where(take, o, gidx)
        u = tl.rand(seed, row * V + o)
        gz = x - tl.log(-tl.log(u + 1e-20) + 1e-20)
        take = gz > sbest
        sbest = tl.where(take, gz, sbest)
        sidx = tl.where(take, o, sidx)
        if ENTROPY:
            mn = tl.maximum(m, x)
            alpha = tl.where(m == -float("inf"), 0.0, tl.exp(m - mn))
            e = tl.where(msk, tl.exp(x - mn), 0.0)
            s = s * alpha + e
            t = t * alpha + e * tl.where(msk, x, 0.0)
            m = mn
    g = tl.argmax(gbest, axis=0)
    tl.store(greedy_ptr + row, tl.max(tl.where(offs == g, gidx, 0), axis=0))
    sm = tl.argmax(sbest, axis=0)
    tl.store(sample_ptr + row, tl.max(tl.where(offs == sm, sidx, 0), axis=0))
    if ENTROPY:
        M = tl.max(m, axis=0)
        sc = tl.where(m == -float("inf"), 0.0, tl.exp(m - M))
        S = tl.sum(s * sc, axis=0)
        Tt = tl.sum(t * sc, axis=0)
        tl.store(ent_ptr + row, M + tl.log(S) - Tt / S)
        if WRITE_PROBS:
            for b in range(NBLK):
                o = b * BLOCK + offs
                msk = o < V
                x = tl.load(logit_ptr + row * V + o, mask=msk, other=-float("inf")).to(tl.float32) * inv_temp
                tl.store(probs_ptr + row * V + o, (tl.exp(x - M) / S).to(probs_ptr.dtype.element_ty), mask=msk)


def sample_rows(logits, temp, seed, probs=None, ent=None, greedy=None, sample=None, entropy=True):
    M, V = logits.shape
    dev = logits.device
    greedy = torch.empty(M, device=dev, dtype=torch.int32) if greedy is None else greedy
    sample = torch.empty(M, device=dev, dtype=torch.int32) if sample is None else sample
    ent = torch.empty(M, device=dev, dtype=torch.float32) if ent is None else ent
    BLOCK = 2048
    _sampler_kernel[(M,)](logits, probs if probs is not None else logits, ent, greedy, sample, V, 1.0 / temp, seed,
                          BLOCK=BLOCK, NBLK=triton.cdiv(V, BLOCK), WRITE_PROBS=probs is not None, ENTROPY=entropy, num_warps=8)
    return greedy, sample, ent
