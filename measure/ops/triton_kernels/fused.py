"""Fused Triton kernels (issue 17, second round): fewer, larger launches for the ops that were
launch- or latency-bound in the first campaign.

- MoE, any batch (`moe_prep`, `moe_scatter`, `gelu_mul_quant`, and the fused-MoE GEMM's atomic
  top-k epilogue in triton_kernels/basic.py): the expert alignment in two launches instead of five, the
  activations' fp8 quantisation, the fill of the padded row list and the zeroing of the output in
  the same launch as the expert count (programs of one grid doing different work), gelu*up fused
  with the fp8 quantisation of its output, and the top-k weighted sum done by the down GEMM
  (fp32 atomic adds into the token's row) instead of a separate reduction.
- MoE, small batches (`moe_gemv_gate_up`, `moe_gemv_down`): two launches per layer: gate and up
  rows of an expert in one program with gelu*up in its epilogue; the down projection loops over a
  token's top-k experts and writes the weighted sum.
- Dense GEMV (`gemv`): y = x @ W.T for a few rows, many narrow programs with long K tiles so every
  SM streams weights (bf16, or fp8 weights with per-channel scales and bf16 activations).
- `norm_fused`: the norms between a layer's blocks in one row pass (post-attention norm + residual
  add + both pre-FFN norms; both post-FFN norms + their sum's norm + residual add + the next
  layer's input norm).
- `qk_norm_rope2`: per-head RMSNorm + RoPE of q and k in one launch.

Imported only where Triton is installed (the device machine); kernels.py records a fallback when
it is not.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from measure.ops.triton_kernels.sampler_parts import _entropy_out, _load_scaled, _samp_step, _sampler_lanes


# ---- MoE alignment + quantisation + fills, one grid ------------------------------------------------
@triton.jit
def _moe_prep_kernel(ids_ptr, counts_ptr, x_ptr, xq_ptr, xs_ptr, sorted_ptr, out_ptr, R, EM, MD, K, NC, NQ, NF,
                     E: tl.constexpr, CH: tl.constexpr, BLOCK_K: tl.constexpr, FCH: tl.constexpr):
    """Programs [0, NC): count routed rows per expert; [NC, NC+NQ): quantise row pid-NC of x to e4m3
    (per-row scale); [NC+NQ, NC+NQ+NF): fill the padded row list with the pad value R; the rest:
    zero the fp32 output (MD elements)."""
    pid = tl.program_id(0)
    if pid < NC:
        o = pid * CH + tl.arange(0, CH)
        e = tl.load(ids_ptr + o, mask=o < R, other=E).to(tl.int32)
        hit = (e[:, None] == tl.arange(0, E)[None, :]).to(tl.int32)
        tl.atomic_add(counts_ptr + tl.arange(0, E), tl.sum(hit, axis=0), sem="relaxed")
    elif pid < NC + NQ:
        row = (pid - NC).to(tl.int64)
        offs = tl.arange(0, BLOCK_K)
        msk = offs < K
        x = tl.load(x_ptr + row * K + offs, mask=msk, other=0.0).to(tl.float32)
        s = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-6) / 448.0
        tl.store(xs_ptr + row, s)
        tl.store(xq_ptr + row * K + offs, (x / s).to(xq_ptr.dtype.element_ty), mask=msk)
    elif pid < NC + NQ + NF:
        o = (pid - NC - NQ).to(tl.int64) * FCH + tl.arange(0, FCH)
        tl.store(sorted_ptr + o, tl.zeros((FCH,), tl.int64) + R, mask=o < EM)
    else:
        o = (pid - NC - NQ - NF).to(tl.int64) * FCH + tl.arange(0, FCH)
        tl.store(out_ptr + o, tl.zeros((FCH,), tl.float32), mask=o < MD)


@triton.jit
def _moe_scatter_kernel(ids_ptr, counts_ptr, cursor_ptr, sorted_ptr, eid_ptr, npad_ptr, R, NB,
                        E: tl.constexpr, BLOCK_M: tl.constexpr, CH: tl.constexpr, BCH: tl.constexpr):
    """Every program recomputes the padded per-expert offsets from the counts (E values) and
    scatters its chunk of routed rows; program 0 also writes the block -> expert map and the padded
    row count."""
    pid = tl.program_id(0)
    oe = tl.arange(0, E)
    counts = tl.load(counts_ptr + oe)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    pad_end = tl.cumsum(padded, axis=0)
    pad_start = pad_end - padded
    if pid == 0:
        tl.store(npad_ptr, tl.sum(padded, axis=0).to(tl.int64))
        for b0 in range(0, NB, BCH):
            ob = b0 + tl.arange(0, BCH)
            ex = tl.sum((pad_end[None, :] <= (ob * BLOCK_M)[:, None]).to(tl.int32), axis=1)
            tl.store(eid_ptr + ob, tl.minimum(ex, E - 1).to(tl.int64), mask=ob < NB)
    o = pid * CH + tl.arange(0, CH)
    m = o < R
    e = tl.load(ids_ptr + o, mask=m, other=0).to(tl.int32)
    start = tl.sum(tl.where(e[:, None] == oe[None, :], pad_start[None, :], 0), axis=1)
    dest = start + tl.atomic_add(cursor_ptr + e, 1, mask=m, sem="relaxed")
    tl.store(sorted_ptr + dest, o.to(tl.int64), mask=m)


def moe_prep(topk_ids, num_experts: int, block_m: int, x=None, out=None, ws=None):
    """(sorted_ids, expert_ids, npad, xq, xs) as moe_align_triton returns them, in one memset and
    two launches; with `x`: its per-row e4m3 quantisation (xq, xs [rows]) in the first launch; with
    `out` (fp32): zeroed in the first launch. `ws`: a dict of reusable buffers."""
    flat = topk_ids.reshape(-1)
    R, dev, E = flat.numel(), flat.device, num_experts
    EM = ((R + E * (block_m - 1) + block_m - 1) // block_m) * block_m
    NB = EM // block_m
    ws = {} if ws is None else ws
    key = (R, E, block_m)
    if ws.get("key") != key:
        ws.update(key=key, sorted=torch.empty(EM, dtype=torch.int64, device=dev), eid=torch.empty(NB, dtype=torch.int64, device=dev),
                  npad=torch.empty(1, dtype=torch.int64, device=dev), cc=torch.empty(2 * E, dtype=torch.int32, device=dev))
    cc = ws["cc"]
    cc.zero_()
    CH, FCH = 128, 1024
    NC = triton.cdiv(R, CH)
    xq = xs = None
    NQ, K = 0, 1
    if x is not None:
        NQ, K = x.shape
        if ws.get("xq") is None or ws["xq"].shape != x.shape:
            ws["xq"] = torch.empty(NQ, K, dtype=torch.float8_e4m3fn, device=dev)
            ws["xs"] = torch.empty(NQ, dtype=torch.float32, device=dev)
        xq, xs = ws["xq"], ws["xs"]
    NF = triton.cdiv(EM, FCH)
    MD = out.numel() if out is not None else 0
    NZ = triton.cdiv(MD, FCH)
    if ws.get("dummy") is None:
        ws["dummy"] = torch.zeros(1, dtype=torch.float32, device=dev)
    dm = ws["dummy"]
    _moe_prep_kernel[(NC + NQ + NF + NZ,)](
        flat, cc, x if x is not None else dm, xq if xq is not None else dm, xs if xs is not None else dm, ws["sorted"],
        out if out is not None else dm, R, EM, MD, K, NC, NQ, NF, E=E, CH=CH, BLOCK_K=triton.next_power_of_2(K), FCH=FCH,
        num_warps=8 if K >= 2048 else 4)
    _moe_scatter_kernel[(NC,)](flat, cc, cc[E:], ws["sorted"], ws["eid"], ws["npad"], R, NB, E=E, BLOCK_M=block_m, CH=CH, BCH=128,
                               num_warps=4)
    return ws["sorted"], ws["eid"], ws["npad"], xq, xs


# ---- gelu * up with the fp8 quantisation of its output ---------------------------------------------
@triton.jit
def _gelu_mul_quant_kernel(gu_ptr, q_ptr, s_ptr, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < D
    g = tl.load(gu_ptr + row * 2 * D + offs, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * D + D + offs, mask=m, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    y = 0.5 * g * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0)) * u
    y = y.to(tl.bfloat16).to(tl.float32)  # what the unfused path quantises
    s = tl.maximum(tl.max(tl.abs(y), axis=0), 1e-6) / 448.0
    tl.store(s_ptr + row, s)
    tl.store(q_ptr + row * D + offs, (y / s).to(q_ptr.dtype.element_ty), mask=m)


def gelu_mul_quant(gu, q, s):
    """q, s = e4m3 quantisation per row of gelu_tanh(gu[:, :D]) * gu[:, D:], D = q.shape[1]."""
    M, D = q.shape
    _gelu_mul_quant_kernel[(M,)](gu, q, s, D, BLOCK=triton.next_power_of_2(D), num_warps=4)
    return q, s


# ---- small-batch MoE in two launches ---------------------------------------------------------------
@triton.jit
def _prefetch_l2(base, nbytes, LINES: tl.constexpr):
    """Ask L2 for the bytes [base, base + nbytes) (base an int8 pointer; at most LINES 128-byte
    lines, the tail repeating the last one; nothing when nbytes <= 0): the loads that follow hit L2
    instead of HBM, and no register waits for the data."""
    if nbytes > 0:
        p = base + tl.minimum(tl.arange(0, LINES) * 128, nbytes - 1)
        tl.inline_asm_elementwise("mov.u32 $0, 0;\n\tprefetch.global.L2 [$1];", "=r,l", [p], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _gelu_tanh(g):
    inner = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    return 0.5 * g * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))


@triton.jit
def _gate_up_dot(a_ptr, arow, wg, wu, nmask, offs_k, k_start, accg, accu, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """accg/accu += the gate and up rows at wg/wu (nmask) against activation row `arow`, from k_start."""
    for k0 in range(k_start, K, BLOCK_K):
        kk = k0 + offs_k
        km = kk < K
        a = tl.load(a_ptr + arow * K + kk, mask=km, other=0.0).to(tl.float32)
        g = tl.load(wg + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        u = tl.load(wu + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        accg += tl.sum(g * a[None, :], axis=1)
        accu += tl.sum(u * a[None, :], axis=1)
    return accg, accu


@triton.jit
def _gate_up_rows(w_ptr, e, pid, F, K: tl.constexpr, BLOCK: tl.constexpr):
    """Block `pid` of expert e's intermediate in w [E, 2F, K]: (its columns, their mask, the gate
    rows' and the up rows' pointers)."""
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    wg = w_ptr + e * 2 * F * K + offs[:, None].to(tl.int64) * K
    return offs, offs < F, wg, wg + F * K


@triton.jit
def _moe_gemv_gate_up_kernel(a_ptr, w_ptr, act_ptr, ids_ptr, ws_ptr, w2_ptr, pf_bytes, pf_total, F, K: tl.constexpr, A_DIV: tl.constexpr,
                             W_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GDC: tl.constexpr = 0,
                             PF_LINES: tl.constexpr = 0):
    """Program (routed row r, column block): gate and up rows of expert e_r against a[r // A_DIV],
    gelu(gate) * up stored: the intermediate never goes to memory. GDC (launched with launch_pdl):
    1 = let the next kernel launch, wait for the previous one's results (the expert ids are one);
    2 = one expert (the dense MLP): expert 0 without reading ids; 3 = wait first, then let the next
    kernel launch: the expert ids are final when it starts, so the down GEMV can fetch its weights
    before it waits. PF_LINES: once e_r is known, this program asks L2 for its share (pf_bytes) of
    expert e_r's down weights (w2_ptr, pf_total bytes an expert), so the down GEMV reads them from L2."""
    r = tl.program_id(0).to(tl.int64)
    pn = tl.program_id(1)
    if GDC == 1 or GDC == 2:
        tl.extra.cuda.gdc_launch_dependents()
    if GDC == 2:
        e = r * 0
    else:
        if GDC == 1 or GDC == 3:
            tl.extra.cuda.gdc_wait()
        if GDC == 3:
            tl.extra.cuda.gdc_launch_dependents()
        e = tl.load(ids_ptr + r).to(tl.int64)
    if PF_LINES:  # the down weights are [E, K, F]: expert e's are K * F elements from e * K * F
        start = pn.to(tl.int64) * pf_bytes
        _prefetch_l2((w2_ptr + e * K * F).to(tl.pointer_type(tl.int8), bitcast=True) + start,
                     tl.minimum(pf_bytes, pf_total - start), PF_LINES)
    offs_n, nmask, wg, wu = _gate_up_rows(w_ptr, e, pn, F, K, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    accg = tl.zeros((BLOCK_N,), tl.float32)
    accu = tl.zeros((BLOCK_N,), tl.float32)
    arow = r // A_DIV
    k_start = 0
    if GDC == 2:  # weights first, then wait for the activations
        km = offs_k < K
        g = tl.load(wg + offs_k[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        u = tl.load(wu + offs_k[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        tl.extra.cuda.gdc_wait()
        a = tl.load(a_ptr + arow * K + offs_k, mask=km, other=0.0).to(tl.float32)
        accg += tl.sum(g * a[None, :], axis=1)
        accu += tl.sum(u * a[None, :], axis=1)
        k_start = BLOCK_K
    accg, accu = _gate_up_dot(a_ptr, arow, wg, wu, nmask, offs_k, k_start, accg, accu, K, BLOCK_K)
    if W_SCALE:
        accg = accg * tl.load(ws_ptr + e * 2 * F + offs_n, mask=nmask, other=0.0)
        accu = accu * tl.load(ws_ptr + e * 2 * F + F + offs_n, mask=nmask, other=0.0)
    tl.store(act_ptr + r * F + offs_n, (_gelu_tanh(accg) * accu).to(act_ptr.dtype.element_ty), mask=nmask)


@triton.jit
def _moe_gemv_down_kernel(act_ptr, w_ptr, out_ptr, ids_ptr, tw_ptr, ws_ptr, N, K: tl.constexpr, TOPK: tl.constexpr,
                          W_SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GDC: tl.constexpr = 0,
                          PF_LINES: tl.constexpr = 0, PF_BYTES: tl.constexpr = 0):
    """Program (token t, column block): sum over the token's top-k experts of weight x expert down
    projection of its intermediate row: the top-k sum needs no extra launch. GDC: launched with
    launch_pdl (let the next kernel launch, wait for the previous one's results first); 2 = the
    gate_up kernel before it was launched with GDC 3 (the expert ids were final when this kernel
    started): ask L2 for this program's weight rows of each of the token's experts (PF_BYTES in
    PF_LINES lines each) before waiting for the intermediate."""
    t = tl.program_id(0).to(tl.int64)
    pn = tl.program_id(1)
    if GDC == 2:
        for j in tl.static_range(TOPK):
            e = tl.load(ids_ptr + t * TOPK + j).to(tl.int64)
            _prefetch_l2((w_ptr + e * N * K + pn.to(tl.int64) * BLOCK_N * K).to(tl.pointer_type(tl.int8), bitcast=True), PF_BYTES, PF_LINES)
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    offs_n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    out = tl.zeros((BLOCK_N,), tl.float32)
    for j in tl.static_range(TOPK):
        r = t * TOPK + j
        e = tl.load(ids_ptr + r).to(tl.int64)
        wrow = w_ptr + e * N * K + offs_n[:, None].to(tl.int64) * K
        acc = tl.zeros((BLOCK_N,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + offs_k
            km = kk < K
            a = tl.load(act_ptr + r * K + kk, mask=km, other=0.0).to(tl.float32)
            w = tl.load(wrow + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(w * a[None, :], axis=1)
        if W_SCALE:
            acc = acc * tl.load(ws_ptr + e * N + offs_n, mask=nmask, other=0.0)
        out += acc * tl.load(tw_ptr + r)
    tl.store(out_ptr + t * N + offs_n, out.to(out_ptr.dtype.element_ty), mask=nmask)


def _lines(nbytes: int) -> int:
    """Prefetch lines (128 B, a power of two for tl.arange) covering nbytes."""
    return triton.next_power_of_2(max(1, -(-nbytes // 128)))


# how a two-launch MoE GEMV pair is launched: (PDL, gate_up triggers after its wait, the down GEMV
# prefetches its weights before its wait, gate_up prefetches the down weights)
MOE_GEMV2_MODES = {"plain": (False, False, False, False), "pdl": (True, False, False, False),
                   "pdlpf": (True, True, True, False), "pf": (False, False, False, True)}


def moe_gemv_gate_up(a, w1, act, ids_flat, *, a_div, w_scale=None, block_n=16, block_k=512, num_warps=4, pdl=False,
                     after_wait=False, prefetch_w2=None):
    """act[r] = gelu(a[r // a_div] @ W1[e_r, :F].T) * (a[r // a_div] @ W1[e_r, F:].T), w1 [E, 2F, K].
    pdl: programmatic dependent launch (with one expert: its weights' first tile loads before the
    wait); after_wait: the next kernel may launch only once the expert ids are final (for
    moe_gemv_down(prefetch=True)); prefetch_w2: the down weights [E, K, F], each program asking L2
    for its share of its expert's."""
    E, F2, K = w1.shape
    F = F2 // 2
    R = ids_flat.numel()
    pn = triton.cdiv(F, block_n)
    pf_bytes = pf_total = pf_lines = 0
    if prefetch_w2 is not None:
        pf_total = prefetch_w2[0].numel() * prefetch_w2.element_size()
        pf_bytes = -(-pf_total // pn)
        pf_lines = _lines(pf_bytes)
    gdc = ((2 if E == 1 else 3 if after_wait else 1) if pdl else 0)
    _moe_gemv_gate_up_kernel[(R, pn)](a, w1, act, ids_flat, w_scale if w_scale is not None else act,
                                      prefetch_w2 if prefetch_w2 is not None else w1, pf_bytes, pf_total, F, K=K, A_DIV=a_div,
                                      W_SCALE=w_scale is not None, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps,
                                      GDC=gdc, PF_LINES=pf_lines, **({"launch_pdl": True} if pdl else {}))
    return act


def moe_gemv_down(act, w2, out, ids_flat, topk_w, *, topk, w_scale=None, block_n=8, block_k=256, num_warps=4, pdl=False,
                  prefetch=False):
    """out[t] = sum_j topk_w[t, j] * act[t * topk + j] @ W2[e_tj].T, w2 [E, N, K]; out [tokens, N].
    prefetch (with pdl, after a gate_up launched with after_wait): each program asks L2 for its
    weight rows before waiting for the intermediate."""
    E, N, K = w2.shape
    T = out.shape[0]
    gdc = (2 if prefetch else 1) if pdl else 0
    _moe_gemv_down_kernel[(T, triton.cdiv(N, block_n))](act, w2, out, ids_flat, topk_w, w_scale if w_scale is not None else out, N,
                                                        K=K, TOPK=topk, W_SCALE=w_scale is not None, BLOCK_N=block_n,
                                                        BLOCK_K=block_k, num_warps=num_warps, GDC=gdc,
                                                        PF_LINES=_lines(block_n * K * w2.element_size()) if prefetch else 0,
                                                        PF_BYTES=block_n * K * w2.element_size() if prefetch else 0,
                                                        **({"launch_pdl": True} if pdl else {}))
    return out


def moe_gemv2(x, w1, w2, act, out, ids_flat, topk_w, *, topk, s1=None, s2=None, cfg_up=(16, 512, 4), cfg_down=(8, 256, 4),
              mode="plain"):
    """The two-launch small-batch MoE (gate_up + gelu*up, then down + top-k sum) launched as
    MOE_GEMV2_MODES[mode] says."""
    pdl, after_wait, pf_down, pf_w2 = MOE_GEMV2_MODES[mode]
    moe_gemv_gate_up(x, w1, act, ids_flat, a_div=topk, w_scale=s1, block_n=cfg_up[0], block_k=cfg_up[1], num_warps=cfg_up[2],
                     pdl=pdl, after_wait=after_wait, prefetch_w2=w2 if pf_w2 else None)
    return moe_gemv_down(act, w2, out, ids_flat, topk_w, topk=topk, w_scale=s2, block_n=cfg_down[0], block_k=cfg_down[1],
                         num_warps=cfg_down[2], pdl=pdl, prefetch=pf_down)


# ---- dense GEMV ------------------------------------------------------------------------------------
@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, ws_ptr, M, N, K: tl.constexpr, MP: tl.constexpr, W_SCALE: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GDC: tl.constexpr = 0, CAP: tl.constexpr = 0.0):
    """GDC (programmatic dependent launch, launched with launch_pdl): 2 = let the next kernel launch
    now, load the first weight tile (weights do not depend on earlier kernels), then wait for the
    previous kernel's results before reading x. CAP > 0: the final-logit softcap tanh(y / CAP) * CAP
    in the epilogue (the lm_head's, into fp32 logits: no separate launch over the vocabulary)."""
    pn = tl.program_id(0)
    offs_n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    offs_m = tl.arange(0, MP)
    mmask = offs_m < M
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((MP, BLOCK_N), tl.float32)
    wrow = w_ptr + offs_n[:, None].to(tl.int64) * K
    k_start = 0
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
        km = offs_k < K
        w = tl.load(wrow + offs_k[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=mmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        k_start = BLOCK_K
    for k0 in range(k_start, K, BLOCK_K):
        kk = k0 + offs_k
        km = kk < K
        w = tl.load(wrow + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + offs_m[:, None] * K + kk[None, :], mask=mmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    if W_SCALE:
        acc = acc * tl.load(ws_ptr + offs_n, mask=nmask, other=0.0)[None, :]
    if CAP > 0.0:
        acc = (2.0 / (1.0 + tl.exp(-2.0 * acc / CAP)) - 1.0) * CAP
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


def gemv(x, w, y, w_scale=None, block_n=4, block_k=1024, num_warps=4, pdl=False, softcap: float = 0.0):
    """y [M, N] = x [M, K] @ w [N, K].T (* w_scale [N]) for a few rows M (softcap > 0: y =
    tanh(y / softcap) * softcap, for the lm_head into fp32 y). pdl: programmatic dependent launch
    (the first weight tile loads while the previous kernel finishes)."""
    M, K = x.shape
    N = w.shape[0]
    _gemv_kernel[(triton.cdiv(N, block_n),)](x, w, y, w_scale if w_scale is not None else y, M, N, K=K, MP=triton.next_power_of_2(M),
                                             W_SCALE=w_scale is not None, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps,
                                             GDC=2 if pdl else 0, CAP=float(softcap), **({"launch_pdl": True} if pdl else {}))
    return y


# ---- fused norms -----------------------------------------------------------------------------------
@triton.jit
def _rms(x, D, eps):
    return tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)


@triton.jit
def _norm_fused_kernel(a_ptr, b_ptr, res_ptr, wa_ptr, wb_ptr, ws_ptr, wo1_ptr, wo2_ptr, o1_ptr, o2_ptr, D, eps,
                       INS: tl.constexpr, OUTS: tl.constexpr, BLOCK: tl.constexpr, GDC: tl.constexpr = 0):
    row = tl.program_id(0).to(tl.int64)
    if GDC:  # launched with launch_pdl: let the next kernel launch, wait for the previous one's results
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    offs = tl.arange(0, BLOCK)
    m = offs < D
    a = tl.load(a_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32)
    y = a * _rms(a, D, eps) * (1.0 + tl.load(wa_ptr + offs, mask=m, other=0.0).to(tl.float32))
    if INS == 2:
        b = tl.load(b_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32)
        y += b * _rms(b, D, eps) * (1.0 + tl.load(wb_ptr + offs, mask=m, other=0.0).to(tl.float32))
        y = y * _rms(y, D, eps) * (1.0 + tl.load(ws_ptr + offs, mask=m, other=0.0).to(tl.float32))
    h = tl.load(res_ptr + row * D + offs, mask=m, other=0.0).to(tl.float32) + y
    tl.store(res_ptr + row * D + offs, h.to(res_ptr.dtype.element_ty), mask=m)
    r = _rms(h, D, eps)
    tl.store(o1_ptr + row * D + offs, (h * r * (1.0 + tl.load(wo1_ptr + offs, mask=m, other=0.0).to(tl.float32))).to(o1_ptr.dtype.element_ty), mask=m)
    if OUTS == 2:
        tl.store(o2_ptr + row * D + offs, (h * r * (1.0 + tl.load(wo2_ptr + offs, mask=m, other=0.0).to(tl.float32))).to(o2_ptr.dtype.element_ty), mask=m)


def norm_fused(a, res, wa, wo1, o1, b=None, wb=None, ws=None, wo2=None, o2=None, eps=1e-6, pdl=False):
    """One row pass: y = norm_a(a) [+ norm_b(b), then norm_s of the sum]; res += y; o1 = norm_o1(res)
    [, o2 = norm_o2(res)] (Gemma's (1 + w) scales)."""
    M, D = a.shape
    ins, outs = (2 if b is not None else 1), (2 if o2 is not None else 1)
    _norm_fused_kernel[(M,)](a, b if b is not None else a, res, wa, wb if wb is not None else wa, ws if ws is not None else wa, wo1,
                             wo2 if wo2 is not None else wo1, o1, o2 if o2 is not None else o1, D, eps, INS=ins, OUTS=outs,
                             BLOCK=triton.next_power_of_2(D), num_warps=8 if D > 2048 else 4, GDC=1 if pdl else 0,
                             **({"launch_pdl": True} if pdl else {}))
    return o1, o2


# ---- q/k norm + RoPE in one launch -----------------------------------------------------------------
@triton.jit
def _norm_rope_row(p, w_ptr, pos, HD: tl.constexpr, HALF: tl.constexpr, eps, theta_log2):
    offs = tl.arange(0, HALF)
    a = tl.load(p + offs).to(tl.float32)
    b = tl.load(p + HALF + offs).to(tl.float32)
    r = tl.rsqrt((tl.sum(a * a, axis=0) + tl.sum(b * b, axis=0)) / HD + eps)
    a = a * r * (1.0 + tl.load(w_ptr + offs).to(tl.float32))
    b = b * r * (1.0 + tl.load(w_ptr + HALF + offs).to(tl.float32))
    ang = pos * tl.exp2(-(offs.to(tl.float32) / HALF) * theta_log2)
    c, s = tl.cos(ang), tl.sin(ang)
    tl.store(p + offs, (a * c - b * s).to(p.dtype.element_ty))
    tl.store(p + HALF + offs, (b * c + a * s).to(p.dtype.element_ty))


@triton.jit
def _qk_norm_rope2_kernel(q_ptr, k_ptr, wq_ptr, wk_ptr, pos_ptr, HQ, HK, HD: tl.constexpr, HALF: tl.constexpr, eps, theta_log2,
                          GDC: tl.constexpr = 0):
    pid = tl.program_id(0).to(tl.int64)
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    tok = pid // (HQ + HK)
    h = pid % (HQ + HK)
    pos = tl.load(pos_ptr + tok).to(tl.float32)
    if h < HQ:
        _norm_rope_row(q_ptr + (tok * HQ + h) * HD, wq_ptr, pos, HD, HALF, eps, theta_log2)
    else:
        _norm_rope_row(k_ptr + (tok * HK + h - HQ) * HD, wk_ptr, pos, HD, HALF, eps, theta_log2)


def qk_norm_rope2(q, k, wq, wk, pos, eps=1e-6, theta=10000.0, pdl=False):
    """In place: per-head RMSNorm then RoPE of q [T, HQ, HD] and k [T, HK, HD] in one launch."""
    T, HQ, HD = q.shape
    HK = k.shape[1] if k is not None else 0
    _qk_norm_rope2_kernel[(T * (HQ + HK),)](q, k if k is not None else q, wq, wk, pos, HQ, HK, HD=HD, HALF=HD // 2, eps=eps,
                                             theta_log2=math.log2(theta), num_warps=4, GDC=1 if pdl else 0,
                                             **({"launch_pdl": True} if pdl else {}))
    return q, k


# ---- split-KV attention combine --------------------------------------------------------------------
@triton.jit
def _flash_combine_kernel(Ms, Ls, Op, O, Mrows, SPLITS: tl.constexpr, SP: tl.constexpr, D: tl.constexpr):
    """One (sequence x KV head, packed query row): merge the splits' partial softmax states."""
    pid = tl.program_id(0).to(tl.int64)
    b = pid // Mrows
    r = pid % Mrows
    os_ = tl.arange(0, SP)
    base = (b * SPLITS + os_) * Mrows + r
    m = tl.load(Ms + base, mask=os_ < SPLITS, other=-float("inf"))
    M = tl.max(m, axis=0)
    w = tl.where(os_ < SPLITS, tl.exp(m - M), 0.0)
    L = tl.sum(w * tl.load(Ls + base, mask=os_ < SPLITS, other=0.0), axis=0)
    od = tl.arange(0, D)
    acc = tl.zeros((D,), tl.float32)
    for s in range(SPLITS):
        ms = tl.load(Ms + (b * SPLITS + s) * Mrows + r)
        acc += tl.exp(ms - M) * tl.load(Op + ((b * SPLITS + s) * Mrows + r) * D + od)
    tl.store(O + (b * Mrows + r) * D + od, (acc / L).to(O.dtype.element_ty))


def flash_combine(Ms, Ls, Op, out, splits: int):
    """out [B, Mrows, D] from the split kernel's partials (Ms, Ls [B*splits*Mrows], Op [.., D])."""
    Bt, Mrows, D = out.shape
    _flash_combine_kernel[(Bt * Mrows,)](Ms, Ls, Op, out, Mrows, SPLITS=splits, SP=triton.next_power_of_2(splits), D=D,
                                         num_warps=4 if D <= 256 else 8)
    return out


# ---- fused-MoE GEMM with the weights streamed by the tensor memory accelerator (Hopper TMA) -------
@triton.jit
def _moe_block_rows(sorted_ids_ptr, pid_m, num_valid_rows, BLOCK_M: tl.constexpr):
    """The sorted rows of row block pid_m and which of them are real (padding ids are >= num_valid_rows);
    the fused-MoE GEMMs (triton_kernels._fused_moe_kernel and the TMA one below) gather and scatter by them."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    rows = tl.load(sorted_ids_ptr + offs_m)
    return rows, rows < num_valid_rows


@triton.jit
def _moe_store_rows(c_ptr, acc, rows, rmask, offs_cn, N, stride_cm, stride_cn, REDUCE_TOPK: tl.constexpr):
    """A fused-MoE GEMM's epilogue: the block's real rows written to their sorted row of c, or with
    REDUCE_TOPK = k the top-k weighted sum: fp32 atomic adds into the token's row (row // k)."""
    if REDUCE_TOPK > 0:
        c_ptrs = c_ptr + (rows // REDUCE_TOPK)[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        tl.atomic_add(c_ptrs, acc, mask=rmask[:, None] & (offs_cn[None, :] < N), sem="relaxed")
    else:
        c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=rmask[:, None] & (offs_cn[None, :] < N))


@triton.jit
def _fused_moe_tma_kernel(a_ptr, b_desc, c_ptr, a_scale_ptr, b_scale_ptr, topk_w_ptr, sorted_ids_ptr, expert_ids_ptr, num_post_pad_ptr,
                          N, K: tl.constexpr, EM, num_valid_rows, stride_am, stride_cm, A_DIV: tl.constexpr, MUL_W: tl.constexpr,
                          USE_FP8: tl.constexpr, REDUCE_TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr):
    """The fused-MoE GEMM (triton_kernels._fused_moe_kernel) with B tiles of expert e loaded through
    a host-made tensor descriptor over the weights viewed as [E * N, K] (N % BLOCK_N == 0, so a tile
    never crosses experts; K tails are zero-filled by the copy engine). Gathered A rows stay plain
    loads."""
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    num_post = tl.load(num_post_pad_ptr)
    if pid_m * BLOCK_M >= num_post:
        return
    rows, rmask = _moe_block_rows(sorted_ids_ptr, pid_m, num_valid_rows, BLOCK_M)
    e = tl.load(expert_ids_ptr + pid_m).to(tl.int32)
    offs_k = tl.arange(0, BLOCK_K)
    a_rows = rows // A_DIV
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :]
    b_row = e * N + pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        kmask = offs_k < K - kk * BLOCK_K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        b = b_desc.load([b_row, kk * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
        a_ptrs += BLOCK_K
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if USE_FP8:
        a_s = tl.load(a_scale_ptr + a_rows, mask=rmask, other=0.0)
        b_s = tl.load(b_scale_ptr + e.to(tl.int64) * N + offs_cn)
        acc = acc * a_s[:, None] * b_s[None, :]
    if MUL_W:
        acc = acc * tl.load(topk_w_ptr + rows, mask=rmask, other=0.0)[:, None]
    _moe_store_rows(c_ptr, acc, rows, rmask, offs_cn, N, stride_cm, 1, REDUCE_TOPK)  # c is row-major: column stride 1


def moe_weight_desc(w, block_n: int, block_k: int):
    """Host tensor descriptor over expert weights w [E, N, K] viewed as [E * N, K]."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    E, N, K = w.shape
    if N % block_n:
        raise ValueError(f"TMA MoE tiles need N % BLOCK_N == 0 (N {N}, BLOCK_N {block_n})")
    w2 = w.reshape(E * N, K)
    return TensorDescriptor(w2, list(w2.shape), list(w2.stride()), [block_n, block_k])


def fused_moe_gemm_tma(a, w, desc, out, sorted_ids, expert_ids, num_post, *, a_div, cfg, topk_w=None, a_scale=None, w_scale=None,
                       reduce_topk=0, num_valid_rows=None):
    """fused_moe_gemm (triton_kernels) with the weights' tiles loaded through `desc` (moe_weight_desc)."""
    E, N, K = w.shape
    EM = sorted_ids.numel()
    bm, bn, bk, _gm, nw, ns = cfg
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    _fused_moe_tma_kernel[grid](
        a, desc, out, a_scale if a_scale is not None else out, w_scale if w_scale is not None else out,
        topk_w if topk_w is not None else out, sorted_ids, expert_ids, num_post, N, K, EM,
        num_valid_rows if num_valid_rows is not None else out.shape[0], a.stride(0), out.stride(0),
        A_DIV=a_div, MUL_W=topk_w is not None, USE_FP8=a_scale is not None, REDUCE_TOPK=reduce_topk,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
    return out


# ---- final-logit softcap into fp32 logits in one launch --------------------------------------------
@triton.jit
def _softcap_kernel(y_ptr, out_ptr, n, cap, BLOCK: tl.constexpr):
    o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    y = tl.load(y_ptr + o, mask=m, other=0.0).to(tl.float32) / cap
    t = 2.0 / (1.0 + tl.exp(-2.0 * y)) - 1.0  # tanh
    tl.store(out_ptr + o, t * cap, mask=m)


def softcap(y, out, cap: float):
    """out (fp32) = tanh(y / cap) * cap, y the bf16 logits (one pass instead of cast, divide, tanh, scale)."""
    n = y.numel()
    _softcap_kernel[(triton.cdiv(n, 4096),)](y, out, n, cap, BLOCK=4096, num_warps=8)
    return out


# ---- issue 17, third round ---------------------------------------------------------------------------
# AR sampler split along the vocabulary (a few rows cannot fill the GPU with one program per row)
@triton.jit
def _sample_split_kernel(logit_ptr, pv_ptr, pi_ptr, V, S, inv_temp, seed, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, split): the best greedy logit and the best Gumbel-perturbed logit of its CHUNK
    of the row (the same in-kernel random numbers as _sampler_kernel: tl.rand(seed, row * V + col))."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    gbest, gidx, sbest, sidx, m, s, t = _sampler_lanes(BLOCK)  # m, s, t: no entropy here (ENTROPY=False leaves them)
    for b in range(0, CHUNK, BLOCK):
        o = sp * CHUNK + b + offs
        x, msk = _load_scaled(logit_ptr, row, V, o, inv_temp)
        gbest, gidx, sbest, sidx, m, s, t = _samp_step(x, o, msk, tl.rand(seed, row * V + o), gbest, gidx, sbest, sidx, m, s, t, False)
    _store_partial(pv_ptr, pi_ptr, (row * S + sp) * 2, offs, gbest, gidx, sbest, sidx)


@triton.jit
def _store_partial(pv_ptr, pi_ptr, base, offs, gbest, gidx, sbest, sidx):
    """A (row, split) program's best greedy and Gumbel values and their columns, for _sample_combine_kernel."""
    g = tl.argmax(gbest, axis=0)
    sm = tl.argmax(sbest, axis=0)
    tl.store(pv_ptr + base, tl.max(gbest, axis=0))
    tl.store(pi_ptr + base, tl.max(tl.where(offs == g, gidx, 0), axis=0))
    tl.store(pv_ptr + base + 1, tl.max(sbest, axis=0))
    tl.store(pi_ptr + base + 1, tl.max(tl.where(offs == sm, sidx, 0), axis=0))


@triton.jit
def _sample_combine_kernel(pv_ptr, pi_ptr, greedy_ptr, sample_ptr, S, SP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    o = tl.arange(0, SP)
    msk = o < S
    gv = tl.load(pv_ptr + (row * S + o) * 2, mask=msk, other=-float("inf"))
    gi = tl.load(pi_ptr + (row * S + o) * 2, mask=msk, other=0)
    sv = tl.load(pv_ptr + (row * S + o) * 2 + 1, mask=msk, other=-float("inf"))
    si = tl.load(pi_ptr + (row * S + o) * 2 + 1, mask=msk, other=0)
    g = tl.argmax(gv, axis=0)
    s = tl.argmax(sv, axis=0)
    tl.store(greedy_ptr + row, tl.max(tl.where(o == g, gi, 0), axis=0))
    tl.store(sample_ptr + row, tl.max(tl.where(o == s, si, 0), axis=0))


def _split_workspace(ws, M: int, S: int, device):
    """The split samplers' partial results (value and column of the greedy and the Gumbel best per
    row and split), kept in `ws` between calls of one shape (CUDA-graph capture needs fixed buffers)."""
    ws = {} if ws is None else ws
    if ws.get("key") != (M, S):
        ws.update(key=(M, S), pv=torch.empty(M * S * 2, device=device, dtype=torch.float32),
                  pi=torch.empty(M * S * 2, device=device, dtype=torch.int32))
    return ws


def sample_rows_split(logits, temp, seed, greedy, sample, ws=None, chunk=2048, block=1024, num_warps=4):
    """AR sampling (argmax + Gumbel-max sample) of a few rows of fp32 logits, each row split in
    chunks over many programs, then one combine launch: what sample_rows(entropy=False) computes."""
    M, V = logits.shape
    S = triton.cdiv(V, chunk)
    ws = _split_workspace(ws, M, S, logits.device)
    _sample_split_kernel[(M, S)](logits, ws["pv"], ws["pi"], V, S, 1.0 / temp, seed, CHUNK=chunk, BLOCK=min(block, chunk),
                                 num_warps=num_warps)
    _sample_combine_kernel[(M,)](ws["pv"], ws["pi"], greedy, sample, S, SP=triton.next_power_of_2(S), num_warps=4)
    return greedy, sample


# ---- router in one launch ----------------------------------------------------------------------------
@triton.jit
def _topk_rows(lg, oe, ok, TOPK: tl.constexpr):
    """Rows of fp32 logits [R, E]: softmax, top-k, renormalised weights -> (weights [R, TOPK], ids)."""
    p = tl.exp(lg - tl.max(lg, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    ws = tl.zeros((lg.shape[0], TOPK), tl.float32)
    idx = tl.zeros((lg.shape[0], TOPK), tl.int32)
    for j in tl.static_range(TOPK):
        mx = tl.max(p, axis=1)
        am = tl.argmax(p, axis=1).to(tl.int32)
        ws = tl.where(ok[None, :] == j, mx[:, None], ws)
        idx = tl.where(ok[None, :] == j, am[:, None], idx)
        p = tl.where(oe[None, :] == am[:, None], -1.0, p)
    return ws / tl.sum(ws, axis=1)[:, None], idx


@triton.jit
def _router_gemv_topk_kernel(x_ptr, w_ptr, lg_ptr, cnt_ptr, w_out_ptr, id_out_ptr, M, D: tl.constexpr, E: tl.constexpr,
                             MP: tl.constexpr, TOPK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, scale, eps,
                             GDC: tl.constexpr = 0):
    """Few tokens: program p computes router logits of experts [p*BLOCK_N, (p+1)*BLOCK_N) for every
    token (and each token's sum of squares on the way); the last program to finish (an arrival
    counter, release/acquire) does the RMS factor, softmax, top-k and renormalisation for all tokens
    and resets the counter: the router in one launch instead of a GEMV and a top-k kernel."""
    pn = tl.program_id(0)
    offs_n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, MP)
    mmask = offs_m < M
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((MP, BLOCK_N), tl.float32)
    ss = tl.zeros((MP,), tl.float32)
    k_start = 0
    if GDC:  # launched with launch_pdl: the first weight tile before waiting for x (and the counter's reset)
        tl.extra.cuda.gdc_launch_dependents()
        km = offs_k < D
        w = tl.load(w_ptr + offs_n[:, None].to(tl.int64) * D + offs_k[None, :], mask=km[None, :], other=0.0).to(tl.float32)
        tl.extra.cuda.gdc_wait()
        x = tl.load(x_ptr + offs_m[:, None] * D + offs_k[None, :], mask=mmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        ss += tl.sum(x * x, axis=1)
        k_start = BLOCK_K
    for k0 in range(k_start, D, BLOCK_K):
        kk = k0 + offs_k
        km = kk < D
        w = tl.load(w_ptr + offs_n[:, None].to(tl.int64) * D + kk[None, :], mask=km[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + offs_m[:, None] * D + kk[None, :], mask=mmask[:, None] & km[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        ss += tl.sum(x * x, axis=1)
    tl.store(lg_ptr + offs_m[:, None] * E + offs_n[None, :], acc, mask=mmask[:, None])
    tl.debug_barrier()
    done = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    if done == tl.num_programs(0) - 1:
        tl.debug_barrier()
        oe = tl.arange(0, E)
        ok = tl.arange(0, TOPK)
        lg = tl.load(lg_ptr + offs_m[:, None] * E + oe[None, :], mask=mmask[:, None], other=0.0, volatile=True)
        lg = lg * (tl.rsqrt(ss / D + eps) * scale)[:, None]
        ws, idx = _topk_rows(lg, oe, ok, TOPK)
        tl.store(w_out_ptr + offs_m[:, None] * TOPK + ok[None, :], ws, mask=mmask[:, None])
        tl.store(id_out_ptr + offs_m[:, None] * TOPK + ok[None, :], idx, mask=mmask[:, None])
        tl.atomic_xchg(cnt_ptr, 0, sem="relaxed", scope="gpu")


def router_gemv_topk(x, w, w_out, id_out, ws, block_n=2, block_k=1024, num_warps=4, eps=1e-6, pdl=False):
    """(weights fp32 [M, topk], ids int32 [M, topk]) of the router for M <= 8 tokens in one launch
    (w [E, D] with the router's scale vector folded in; `ws`: dict holding the logits scratch and the
    arrival counter, which the kernel leaves at zero)."""
    M, D = x.shape
    E = w.shape[0]
    if ws.get("key") != (M, E):
        ws.update(key=(M, E), lg=torch.empty(M, E, device=x.device, dtype=torch.float32),
                  cnt=torch.zeros(1, device=x.device, dtype=torch.int32))
    _router_gemv_topk_kernel[(E // block_n,)](x, w, ws["lg"], ws["cnt"], w_out, id_out, M, D=D, E=E, MP=max(2, triton.next_power_of_2(M)),
                                              TOPK=id_out.shape[1], BLOCK_N=block_n, BLOCK_K=block_k, scale=D ** -0.5, eps=eps,
                                              num_warps=num_warps, GDC=1 if pdl else 0, **({"launch_pdl": True} if pdl else {}))
    return w_out, id_out


@triton.jit
def _router_dot_topk_kernel(x_ptr, w_ptr, w_out_ptr, id_out_ptr, M, D: tl.constexpr, E: tl.constexpr, TOPK: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, scale, eps):
    """Many tokens: a program per BLOCK_M tokens computes all E logits with tensor-core dots (and the
    tokens' sums of squares from the same x tiles), then RMS factor, softmax, top-k and
    renormalisation in registers: one launch, x read once."""
    pm = tl.program_id(0)
    offs_m = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    mmask = offs_m < M
    oe = tl.arange(0, E)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, E), tl.float32)
    ss = tl.zeros((BLOCK_M,), tl.float32)
    for k0 in range(0, D, BLOCK_K):
        kk = k0 + offs_k
        km = kk < D
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * D + kk[None, :], mask=mmask[:, None] & km[None, :], other=0.0)
        w = tl.load(w_ptr + oe[None, :] * D + kk[:, None], mask=km[:, None], other=0.0)
        acc = tl.dot(x, w, acc)
        xf = x.to(tl.float32)
        ss += tl.sum(xf * xf, axis=1)
    acc = acc * (tl.rsqrt(ss / D + eps) * scale)[:, None]
    ok = tl.arange(0, TOPK)
    ws, idx = _topk_rows(acc, oe, ok, TOPK)
    tl.store(w_out_ptr + offs_m[:, None] * TOPK + ok[None, :], ws, mask=mmask[:, None])
    tl.store(id_out_ptr + offs_m[:, None] * TOPK + ok[None, :], idx, mask=mmask[:, None])


def router_dot_topk(x, w, w_out, id_out, block_m=16, block_k=64, num_warps=4, num_stages=3, eps=1e-6):
    M, D = x.shape
    E = w.shape[0]
    _router_dot_topk_kernel[(triton.cdiv(M, block_m),)](x, w, w_out, id_out, M, D=D, E=E, TOPK=id_out.shape[1], BLOCK_M=block_m,
                                                        BLOCK_K=block_k, scale=D ** -0.5, eps=eps, num_warps=num_warps,
                                                        num_stages=num_stages)
    return w_out, id_out


# ---- q/k norm + RoPE, all heads of a token per program ----------------------------------------------
@triton.jit
def _norm_rope_heads(p, w_ptr, pos, H: tl.constexpr, HD: tl.constexpr, HALF: tl.constexpr, eps, theta_log2):
    oh = tl.arange(0, H)
    offs = tl.arange(0, HALF)
    pa = p + oh[:, None] * HD + offs[None, :]
    a = tl.load(pa).to(tl.float32)
    b = tl.load(pa + HALF).to(tl.float32)
    r = tl.rsqrt((tl.sum(a * a, axis=1) + tl.sum(b * b, axis=1)) / HD + eps)[:, None]
    a = a * r * (1.0 + tl.load(w_ptr + offs).to(tl.float32))[None, :]
    b = b * r * (1.0 + tl.load(w_ptr + HALF + offs).to(tl.float32))[None, :]
    ang = pos * tl.exp2(-(offs.to(tl.float32) / HALF) * theta_log2)
    c, s = tl.cos(ang)[None, :], tl.sin(ang)[None, :]
    tl.store(pa, (a * c - b * s).to(p.dtype.element_ty))
    tl.store(pa + HALF, (b * c + a * s).to(p.dtype.element_ty))


@triton.jit
def _qk_norm_rope3_kernel(q_ptr, k_ptr, wq_ptr, wk_ptr, pos_ptr, HQ: tl.constexpr, HK: tl.constexpr, HD: tl.constexpr,
                          HALF: tl.constexpr, eps, theta_log2):
    tok = tl.program_id(0).to(tl.int64)
    which = tl.program_id(1)
    pos = tl.load(pos_ptr + tok).to(tl.float32)
    if which == 0:
        _norm_rope_heads(q_ptr + tok * HQ * HD, wq_ptr, pos, HQ, HD, HALF, eps, theta_log2)
    else:
        _norm_rope_heads(k_ptr + tok * HK * HD, wk_ptr, pos, HK, HD, HALF, eps, theta_log2)


def qk_norm_rope3(q, k, wq, wk, pos, eps=1e-6, theta=10000.0, num_warps=None):
    """In place, as qk_norm_rope2, with one program per (token, q or k) over all its heads (2-D
    tiles: wide loads, the rotary angles computed once per token)."""
    T, HQ, HD = q.shape
    HK = k.shape[1] if k is not None else 0
    num_warps = num_warps or (8 if HQ * HD >= 8192 else 4)
    _qk_norm_rope3_kernel[(T, 2 if HK else 1)](q, k if k is not None else q, wq, wk, pos, HQ=HQ, HK=max(HK, 1), HD=HD, HALF=HD // 2,
                                                eps=eps, theta_log2=math.log2(theta), num_warps=num_warps)
    return q, k


# ---- samplers with one Philox call per four elements ------------------------------------------------
@triton.jit
def _load_step(logit_ptr, row, V, o, inv_temp, u, gbest, gidx, sbest, sidx, m, s, t, ENTROPY: tl.constexpr):
    x, msk = _load_scaled(logit_ptr, row, V, o, inv_temp)
    return _samp_step(x, o, msk, u, gbest, gidx, sbest, sidx, m, s, t, ENTROPY)


@triton.jit
def _sampler_r4_kernel(logit_ptr, probs_ptr, ent_ptr, greedy_ptr, sample_ptr, pv_ptr, pi_ptr, V, S, inv_temp, seed,
                       CHUNK: tl.constexpr, Q: tl.constexpr, WRITE_PROBS: tl.constexpr, ENTROPY: tl.constexpr, SPLIT: tl.constexpr):
    """_sampler_kernel with the uniform numbers drawn four at a time (tl.rand4x: one Philox call per
    four elements instead of one per element; the Gumbel sample's random numbers differ from
    _sampler_kernel's, its distribution does not). Each iteration covers 4 x Q elements. SPLIT: a
    program per (row, CHUNK of the row) writing its partial argmax / sample to pv/pi (combined by
    _sample_combine_kernel or _probs_split_kernel) and, with ENTROPY, its online-softmax partial
    (max, sum-exp, sum-exp*x) to ent_ptr [rows, S, 3]; else a program per whole row (CHUNK >= V)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    offs = tl.arange(0, Q)
    gbest, gidx, sbest, sidx, m, s, t = _sampler_lanes(Q)
    for b in range(0, CHUNK, 4 * Q):
        o = sp * CHUNK + b + offs
        u0, u1, u2, u3 = tl.rand4x(seed, row * V + o)
        gbest, gidx, sbest, sidx, m, s, t = _load_step(logit_ptr, row, V, o, inv_temp, u0, gbest, gidx, sbest, sidx, m, s, t, ENTROPY)
        gbest, gidx, sbest, sidx, m, s, t = _load_step(logit_ptr, row, V, o + Q, inv_temp, u1, gbest, gidx, sbest, sidx, m, s, t, ENTROPY)
        gbest, gidx, sbest, sidx, m, s, t = _load_step(logit_ptr, row, V, o + 2 * Q, inv_temp, u2, gbest, gidx, sbest, sidx, m, s, t, ENTROPY)
        gbest, gidx, sbest, sidx, m, s, t = _load_step(logit_ptr, row, V, o + 3 * Q, inv_temp, u3, gbest, gidx, sbest, sidx, m, s, t, ENTROPY)
    if SPLIT:
        _store_partial(pv_ptr, pi_ptr, (row * S + sp) * 2, offs, gbest, gidx, sbest, sidx)
        if ENTROPY:
            mc = tl.max(m, axis=0)
            sc = tl.where(m == -float("inf"), 0.0, tl.exp(m - mc))
            base = (row * S + sp) * 3
            tl.store(ent_ptr + base, mc)
            tl.store(ent_ptr + base + 1, tl.sum(s * sc, axis=0))
            tl.store(ent_ptr + base + 2, tl.sum(t * sc, axis=0))
    else:
        g = tl.argmax(gbest, axis=0)
        sm = tl.argmax(sbest, axis=0)
        tl.store(greedy_ptr + row, tl.max(tl.where(offs == g, gidx, 0), axis=0))
        tl.store(sample_ptr + row, tl.max(tl.where(offs == sm, sidx, 0), axis=0))
        if ENTROPY:
            _entropy_out(logit_ptr, probs_ptr, ent_ptr, row, V, inv_temp, m, s, t, offs, CHUNK, Q, WRITE_PROBS)


def sample_rows_r4(logits, temp, seed, probs=None, ent=None, greedy=None, sample=None, entropy=True, q=1024, num_warps=8):
    """sample_rows with tl.rand4x (a program per row)."""
    M, V = logits.shape
    dev = logits.device
    greedy = torch.empty(M, device=dev, dtype=torch.int32) if greedy is None else greedy
    sample = torch.empty(M, device=dev, dtype=torch.int32) if sample is None else sample
    ent = torch.empty(M, device=dev, dtype=torch.float32) if ent is None else ent
    chunk = triton.cdiv(V, 4 * q) * 4 * q
    _sampler_r4_kernel[(M, 1)](logits, probs if probs is not None else logits, ent, greedy, sample, ent, greedy, V, 1, 1.0 / temp, seed,
                               CHUNK=chunk, Q=q, WRITE_PROBS=probs is not None, ENTROPY=entropy, SPLIT=False, num_warps=num_warps)
    return greedy, sample, ent


def sample_rows_split_r4(logits, temp, seed, greedy, sample, ws=None, chunk=4096, q=512, num_warps=4):
    """sample_rows_split with tl.rand4x."""
    M, V = logits.shape
    S = triton.cdiv(V, chunk)
    ws = _split_workspace(ws, M, S, logits.device)
    _sampler_r4_kernel[(M, S)](logits, logits, ws["pv"], greedy, sample, ws["pv"], ws["pi"], V, S, 1.0 / temp, seed,
                               CHUNK=chunk, Q=q, WRITE_PROBS=False, ENTROPY=False, SPLIT=True, num_warps=num_warps)
    _sample_combine_kernel[(M,)](ws["pv"], ws["pi"], greedy, sample, S, SP=triton.next_power_of_2(S), num_warps=4)
    return greedy, sample


@triton.jit
def _probs_split_kernel(logit_ptr, probs_ptr, pe_ptr, pv_ptr, pi_ptr, ent_ptr, greedy_ptr, sample_ptr, V, S, inv_temp,
                        CHUNK: tl.constexpr, BLOCK: tl.constexpr, SP: tl.constexpr):
    """The split DiffusionGemma sampler's second pass, a program per (row, CHUNK): the row's softmax
    max and sum from the first pass's partials (a few dozen, read by every program of the row), then
    this chunk's bf16 probabilities; the row's first program also writes its entropy, greedy token and
    sample (the partials' best), so no separate combine launch."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    o = tl.arange(0, SP)
    msk = o < S
    mc = tl.load(pe_ptr + (row * S + o) * 3, mask=msk, other=-float("inf"))
    M = tl.max(mc, axis=0)
    w = tl.where(mc == -float("inf"), 0.0, tl.exp(mc - M))
    Ssum = tl.sum(w * tl.load(pe_ptr + (row * S + o) * 3 + 1, mask=msk, other=0.0), axis=0)
    if sp == 0:
        T = tl.sum(w * tl.load(pe_ptr + (row * S + o) * 3 + 2, mask=msk, other=0.0), axis=0)
        tl.store(ent_ptr + row, M + tl.log(Ssum) - T / Ssum)
        gv = tl.load(pv_ptr + (row * S + o) * 2, mask=msk, other=-float("inf"))
        gi = tl.load(pi_ptr + (row * S + o) * 2, mask=msk, other=0)
        sv = tl.load(pv_ptr + (row * S + o) * 2 + 1, mask=msk, other=-float("inf"))
        si = tl.load(pi_ptr + (row * S + o) * 2 + 1, mask=msk, other=0)
        tl.store(greedy_ptr + row, tl.max(tl.where(o == tl.argmax(gv, axis=0), gi, 0), axis=0))
        tl.store(sample_ptr + row, tl.max(tl.where(o == tl.argmax(sv, axis=0), si, 0), axis=0))
    offs = tl.arange(0, BLOCK)
    for b in range(0, CHUNK, BLOCK):
        x, xm = _load_scaled(logit_ptr, row, V, sp * CHUNK + b + offs, inv_temp)
        tl.store(probs_ptr + row * V + sp * CHUNK + b + offs, (tl.exp(x - M) / Ssum).to(probs_ptr.dtype.element_ty), mask=xm)


def sample_rows_dg_split(logits, temp, seed, probs, ent, greedy, sample, ws=None, chunk=8192, q=512, block=2048, num_warps=4):
    """DiffusionGemma's row sampler (entropy, greedy, Gumbel sample with the same random numbers as
    sample_rows_r4, bf16 probabilities) with each row split over chunks in two launches: the partial
    pass, then probabilities (+ the row's combine in its first program). For few rows of a wide
    vocabulary, where a program per row leaves most of the GPU idle. `ws`: a dict reused across calls."""
    M, V = logits.shape
    S = triton.cdiv(V, chunk)
    ws = _split_workspace(ws, M, S, logits.device)
    if ws.get("pe_key") != (M, S):
        ws.update(pe_key=(M, S), pe=torch.empty(M * S * 3, device=logits.device, dtype=torch.float32))
    _sampler_r4_kernel[(M, S)](logits, logits, ws["pe"], greedy, sample, ws["pv"], ws["pi"], V, S, 1.0 / temp, seed,
                               CHUNK=chunk, Q=q, WRITE_PROBS=False, ENTROPY=True, SPLIT=True, num_warps=num_warps)
    _probs_split_kernel[(M, S)](logits, probs, ws["pe"], ws["pv"], ws["pi"], ent, greedy, sample, V, S, 1.0 / temp,
                                CHUNK=chunk, BLOCK=block, SP=triton.next_power_of_2(S), num_warps=num_warps)
    return greedy, sample, ent
