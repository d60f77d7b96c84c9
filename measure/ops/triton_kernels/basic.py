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

from measure.ops.triton_kernels.fused import _moe_block_rows, _moe_store_rows
from measure.ops.triton_kernels.sampler_parts import _entropy_out, _load_scaled, _samp_step, _sampler_lanes


@triton.jit
def _fused_moe_kernel(
    a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_w_ptr,
    sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr,
    N, K: tl.constexpr, EM, num_valid_rows,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn, stride_bse, stride_bsn,
    A_DIV: tl.constexpr, MUL_W: tl.constexpr, USE_FP8: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, W8A16: tl.constexpr = False,
    REDUCE_TOPK: tl.constexpr = 0,
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
    rows, rmask = _moe_block_rows(sorted_ids_ptr, pid_m, num_valid_rows, BLOCK_M)
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
        if W8A16:
            b = b.to(tl.bfloat16)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if USE_FP8:
        a_s = tl.load(a_scale_ptr + a_rows, mask=rmask, other=0.0)
        b_s = tl.load(b_scale_ptr + e * stride_bse + offs_n * stride_bsn)
        acc = acc * a_s[:, None] * b_s[None, :]
    if W8A16:
        b_s = tl.load(b_scale_ptr + e * stride_bse + offs_n * stride_bsn)
        acc = acc * b_s[None, :]
    if MUL_W:
        w = tl.load(topk_w_ptr + rows, mask=rmask, other=0.0)
        acc = acc * w[:, None]
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    _moe_store_rows(c_ptr, acc, rows, rmask, offs_cn, N, stride_cm, stride_cn, REDUCE_TOPK)


def fused_moe_gemm(a, w, out, sorted_ids, expert_ids, num_post, *, a_div, cfg, topk_w=None, a_scale=None, w_scale=None, w8a16=False,
                   reduce_topk=0, num_valid_rows=None):
    """out[r] = a[r // a_div] @ w[e(r)].T (* scales) (* topk_w[r]) for every valid sorted row r.
    a: [rows_a, K]; w: [E, N, K]; out: [R, N]; sorted_ids: [EM] (pad value R). reduce_topk = k:
    out [R / k, N] fp32 (zeroed), out[r // k] += the row instead (the top-k sum in the epilogue)."""
    E, N, K = w.shape
    EM = sorted_ids.numel()
    bm, bn, bk, gm, nw, ns = cfg
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    fp8 = a_scale is not None
    dummy = out
    _fused_moe_kernel[grid](
        a, w, out, a_scale if fp8 else dummy, w_scale if (fp8 or w8a16) else dummy, topk_w if topk_w is not None else dummy,
        sorted_ids, expert_ids, num_post,
        N, K, EM, num_valid_rows if num_valid_rows is not None else out.shape[0],
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        w_scale.stride(0) if (fp8 or w8a16) else 0, w_scale.stride(1) if (fp8 or w8a16) else 0,
        A_DIV=a_div, MUL_W=topk_w is not None, USE_FP8=fp8,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, W8A16=w8a16, REDUCE_TOPK=reduce_topk, num_warps=nw, num_stages=ns,
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
    gbest, gidx, sbest, sidx, m, s, t = _sampler_lanes(BLOCK)
    for b in range(NBLK):
        o = b * BLOCK + offs
        x, msk = _load_scaled(logit_ptr, row, V, o, inv_temp)
        gbest, gidx, sbest, sidx, m, s, t = _samp_step(x, o, msk, tl.rand(seed, row * V + o), gbest, gidx, sbest, sidx, m, s, t, ENTROPY)
    g = tl.argmax(gbest, axis=0)
    tl.store(greedy_ptr + row, tl.max(tl.where(offs == g, gidx, 0), axis=0))
    sm = tl.argmax(sbest, axis=0)
    tl.store(sample_ptr + row, tl.max(tl.where(offs == sm, sidx, 0), axis=0))
    if ENTROPY:
        _entropy_out(logit_ptr, probs_ptr, ent_ptr, row, V, inv_temp, m, s, t, offs, NBLK * BLOCK, BLOCK, WRITE_PROBS)


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


@triton.jit
def _moe_gemv_kernel(a_ptr, w_ptr, out_ptr, ids_ptr, a_scale_ptr, w_scale_ptr, topk_w_ptr, N, K: tl.constexpr,
                     A_DIV: tl.constexpr, MUL_W: tl.constexpr, USE_FP8: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     W_SCALE_ONLY: tl.constexpr = False):
    """Small-batch MoE: one program per (routed row r, column block): out[r] = a[r // A_DIV] @ W[e_r].T;
    no sorting or padding (each routed row streams its expert's weights; rows rarely share experts at
    decode batch sizes)."""
    r = tl.program_id(0).to(tl.int64)
    pn = tl.program_id(1)
    e = tl.load(ids_ptr + r).to(tl.int64)
    offs_n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    arow = r // A_DIV
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        kmask = kk < K
        a = tl.load(a_ptr + arow * K + kk, mask=kmask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + e * N * K + offs_n[:, None].to(tl.int64) * K + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * a[None, :], axis=1)
    if USE_FP8:
        acc = acc * tl.load(a_scale_ptr + arow) * tl.load(w_scale_ptr + e * N + offs_n, mask=nmask, other=0.0)
    if W_SCALE_ONLY:
        acc = acc * tl.load(w_scale_ptr + e * N + offs_n, mask=nmask, other=0.0)
    if MUL_W:
        acc = acc * tl.load(topk_w_ptr + r)
    tl.store(out_ptr + r * N + offs_n, acc.to(out_ptr.dtype.element_ty), mask=nmask)


def moe_gemv(a, w, out, ids_flat, *, a_div, topk_w=None, a_scale=None, w_scale=None, block_n=32, block_k=256, num_warps=4):
    """a_scale and w_scale: w8a8; w_scale alone: fp8 weights with bf16 activations (w8a16)."""
    E, N, K = w.shape
    R = ids_flat.numel()
    fp8 = a_scale is not None
    wso = w_scale is not None and not fp8
    _moe_gemv_kernel[(R, triton.cdiv(N, block_n))](
        a, w, out, ids_flat, a_scale if fp8 else out, w_scale if w_scale is not None else out, topk_w if topk_w is not None else out, N, K=K,
        A_DIV=a_div, MUL_W=topk_w is not None, USE_FP8=fp8, BLOCK_N=block_n, BLOCK_K=block_k, W_SCALE_ONLY=wso, num_warps=num_warps)
    return out


@triton.jit
def _router_topk_kernel(x_ptr, logit_ptr, w_out_ptr, id_out_ptr, D, E: tl.constexpr, TOPK: tl.constexpr, BLOCK_D: tl.constexpr,
                        scale, eps):
    """Per token: the router's RMSNorm factor (its scale vector is folded into the GEMM weights),
    fp32 softmax over the experts, top-k, renormalised weights."""
    row = tl.program_id(0).to(tl.int64)
    od = tl.arange(0, BLOCK_D)
    x = tl.load(x_ptr + row * D + od, mask=od < D, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps) * scale
    oe = tl.arange(0, E)
    lg = tl.load(logit_ptr + row * E + oe).to(tl.float32) * r
    p = tl.exp(lg - tl.max(lg, axis=0))
    p = p / tl.sum(p, axis=0)
    ok = tl.arange(0, TOPK)
    ws = tl.zeros((TOPK,), tl.float32)
    idx = tl.zeros((TOPK,), tl.int32)
    for j in tl.static_range(TOPK):
        mx = tl.max(p, axis=0)
        am = tl.argmax(p, axis=0)
        ws = tl.where(ok == j, mx, ws)
        idx = tl.where(ok == j, am, idx)
        p = tl.where(oe == am, -1.0, p)
    ws = ws / tl.sum(ws, axis=0)
    tl.store(w_out_ptr + row * TOPK + ok, ws)
    tl.store(id_out_ptr + row * TOPK + ok, idx)


def router_topk(x, logits, topk, w_out=None, id_out=None, eps=1e-6):
    M, D = x.shape
    E = logits.shape[1]
    w_out = torch.empty(M, topk, device=x.device, dtype=torch.float32) if w_out is None else w_out
    id_out = torch.empty(M, topk, device=x.device, dtype=torch.int32) if id_out is None else id_out
    _router_topk_kernel[(M,)](x, logits, w_out, id_out, D, E=E, TOPK=topk, BLOCK_D=triton.next_power_of_2(D),
                              scale=D ** -0.5, eps=eps, num_warps=4)
    return w_out, id_out


@triton.jit
def _flash_gqa_kernel(Q, K, V, O, Ms, Ls, sm_scale, Mrows, qlen, L, per_split,
                      sqb, sqm, skb, skn, svb, svn, sob, som, SPLITS: tl.constexpr,
                      D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ALIGNED: tl.constexpr):
    """Flash attention for grouped heads with large head_dim (512): one (sequence, KV head) per
    program column, the group's query heads packed as rows (row r is query position r % qlen), an
    optional lower-right causal mask, optional split over keys (flash-decoding) with partials in
    Ms/Ls/O reduced afterwards (torch, or one Triton combine launch). Merging them in the kernel by
    the last split to finish lost at decode (14.3 vs 7.6 us, H100, data/runs/ops/h100/dc-20261123)
    and left the code (issue 28)."""
    pid_m = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    sp = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    rmask = offs_m < Mrows
    q = tl.load(Q + b * sqb + offs_m[:, None] * sqm + offs_d[None, :], mask=rmask[:, None], other=0.0)
    qpos = (L - qlen) + (offs_m % qlen)
    lo = sp * per_split
    hi = tl.minimum(L, lo + per_split)
    if CAUSAL:
        if ALIGNED:
            hi = tl.minimum(hi, L - qlen + (pid_m * BLOCK_M) % qlen + BLOCK_M)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        kn = start + offs_n
        kmask = kn < hi
        k = tl.load(K + b * skb + kn[None, :] * skn + offs_d[:, None], mask=kmask[None, :], other=0.0)
        s = tl.dot(q, k) * sm_scale
        valid = kmask[None, :]
        if CAUSAL:
            valid = valid & (kn[None, :] <= qpos[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * svb + kn[:, None] * svn + offs_d[None, :], mask=kmask[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if SPLITS == 1:
        acc = acc / l_i[:, None]
        tl.store(O + b * sob + offs_m[:, None] * som + offs_d[None, :], acc.to(O.dtype.element_ty), mask=rmask[:, None])
    else:
        base = (b * SPLITS + sp) * Mrows
        tl.store(Ms + base + offs_m, m_i, mask=rmask)
        tl.store(Ls + base + offs_m, l_i, mask=rmask)
        tl.store(O + (b * SPLITS + sp) * Mrows * D + offs_m[:, None] * D + offs_d[None, :], acc, mask=rmask[:, None])


def flash_gqa(q, k, v, qlen, causal, splits=1, block_m=32, block_n=32, num_warps=8, num_stages=2, ws=None, combine="torch"):
    """q: [B, Mrows, D] (B = seqs x KV heads, the group's query heads packed as rows), k/v: [B, L, D].
    combine: how split partials are merged: "torch" (several ops) or "triton" (one more launch); ws:
    the partials' buffers (Ms, Ls, O), made by the caller outside timed calls."""
    Bt, Mrows, D = q.shape
    L = k.shape[1]
    per_split = triton.cdiv(triton.cdiv(L, splits), block_n) * block_n
    splits = triton.cdiv(L, per_split)
    grid = (triton.cdiv(Mrows, block_m), Bt, splits)
    if splits == 1:
        out = torch.empty_like(q)
        Ms = Ls = out
    else:
        if ws is None:
            ws = (torch.empty(Bt * splits * Mrows, device=q.device, dtype=torch.float32),
                  torch.empty(Bt * splits * Mrows, device=q.device, dtype=torch.float32),
                  torch.empty(Bt * splits * Mrows * D, device=q.device, dtype=torch.float32))
        Ms, Ls, out = ws[:3]
    aligned = qlen % block_m == 0
    _flash_gqa_kernel[grid](q, k, v, out, Ms, Ls, D ** -0.5, Mrows, qlen, L, per_split,
                            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                            out.stride(0) if splits == 1 else 0, out.stride(1) if splits == 1 else 0,
                            SPLITS=splits, D=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal, ALIGNED=aligned,
                            num_warps=num_warps, num_stages=num_stages)
    if splits == 1:
        return out
    if combine == "triton":
        from measure.ops.triton_kernels.fused import flash_combine

        return flash_combine(Ms, Ls, out, torch.empty_like(q), splits)
    m = Ms.view(Bt, splits, Mrows)
    l_ = Ls.view(Bt, splits, Mrows)
    M = m.max(1, keepdim=True).values
    w = torch.exp(m - M)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    o = (out.view(Bt, splits, Mrows, D) * w[..., None]).sum(1) / (l_ * w).sum(1)[..., None]
    return o.to(q.dtype)


# ---- expert alignment in three small kernels (vLLM's moe_align_block_size, instead of ~12 torch ops) ----
@triton.jit
def _align_count_kernel(ids_ptr, counts_ptr, R, E: tl.constexpr, CHUNK: tl.constexpr):
    o = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + o, mask=o < R, other=E).to(tl.int32)  # E: no bin
    hit = (e[:, None] == tl.arange(0, E)[None, :]).to(tl.int32)
    tl.atomic_add(counts_ptr + tl.arange(0, E), tl.sum(hit, axis=0))


@triton.jit
def _align_scan_kernel(counts_ptr, cursor_ptr, eid_ptr, npad_ptr, NB, E: tl.constexpr, BLOCK_M: tl.constexpr, BCH: tl.constexpr):
    offs_e = tl.arange(0, E)
    counts = tl.load(counts_ptr + offs_e)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    pad_end = tl.cumsum(padded, axis=0)
    tl.store(cursor_ptr + offs_e, pad_end - padded)
    tl.store(npad_ptr, tl.sum(padded, axis=0).to(tl.int64))
    for b0 in range(0, NB, BCH):
        ob = b0 + tl.arange(0, BCH)
        ex = tl.sum((pad_end[None, :] <= (ob * BLOCK_M)[:, None]).to(tl.int32), axis=1)
        tl.store(eid_ptr + ob, tl.minimum(ex, E - 1).to(tl.int64), mask=ob < NB)


@triton.jit
def _align_scatter_kernel(ids_ptr, cursor_ptr, sorted_ptr, R, CHUNK: tl.constexpr):
    o = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    m = o < R
    e = tl.load(ids_ptr + o, mask=m, other=0).to(tl.int32)
    dest = tl.atomic_add(cursor_ptr + e, 1, mask=m)
    tl.store(sorted_ptr + dest, o.to(tl.int64), mask=m)


def moe_align_triton(topk_ids, num_experts: int, block_m: int):
    """What kernels.moe_align returns (sorted_ids [EM] padded with R, expert id per BLOCK_M block,
    padded row count), in a memset, a fill and three Triton kernels; rows of one expert in any order
    (atomics), which the fused GEMM does not care about. num_experts: a power of two."""
    flat = topk_ids.reshape(-1)
    R = flat.numel()
    dev = flat.device
    EM = ((R + num_experts * (block_m - 1) + block_m - 1) // block_m) * block_m
    NB = EM // block_m
    sorted_ids = torch.full((EM,), R, dtype=torch.int64, device=dev)
    expert_ids = torch.empty(NB, dtype=torch.int64, device=dev)
    npad = torch.empty(1, dtype=torch.int64, device=dev)
    counts = torch.zeros(num_experts, dtype=torch.int32, device=dev)
    cursor = torch.empty(num_experts, dtype=torch.int32, device=dev)
    chunk = 128
    _align_count_kernel[(triton.cdiv(R, chunk),)](flat, counts, R, E=num_experts, CHUNK=chunk, num_warps=4)
    _align_scan_kernel[(1,)](counts, cursor, expert_ids, npad, NB, E=num_experts, BLOCK_M=block_m, BCH=128, num_warps=4)
    _align_scatter_kernel[(triton.cdiv(R, chunk),)](flat, cursor, sorted_ids, R, CHUNK=chunk, num_warps=4)
    return sorted_ids, expert_ids, npad
