"""The pieces every Triton sampler kernel is built of (triton_kernels._sampler_kernel, and the
split and rand4x variants in triton_kernels.fused): one block's load, argmax / Gumbel-max / online-entropy
step, the per-lane state and the entropy + probabilities epilogue. One copy, so the variants differ
only where they mean to (how rows are split, how random numbers are drawn)."""

import triton
import triton.language as tl


@triton.jit
def _load_scaled(logit_ptr, row, V, o, inv_temp):
    """Logits row[o] (masked past V to -inf) in fp32 over the temperature, and the mask."""
    msk = o < V
    return tl.load(logit_ptr + row * V + o, mask=msk, other=-float("inf")).to(tl.float32) * inv_temp, msk


@triton.jit
def _sampler_lanes(N: tl.constexpr):
    """A sampler row's per-lane state: greedy value and column, Gumbel value and column, and the online
    max / sum-exp / sum-exp*x of the entropy."""
    return (tl.full((N,), -float("inf"), tl.float32), tl.zeros((N,), tl.int32), tl.full((N,), -float("inf"), tl.float32),
            tl.zeros((N,), tl.int32), tl.full((N,), -float("inf"), tl.float32), tl.zeros((N,), tl.float32), tl.zeros((N,), tl.float32))


@triton.jit
def _samp_step(x, o, msk, u, gbest, gidx, sbest, sidx, m, s, t, ENTROPY: tl.constexpr):
    """One block of a sampler row: running argmax, Gumbel-max sample with uniforms u, and (ENTROPY)
    the online max / sum-exp / sum-exp*x."""
    take = x > gbest
    gbest = tl.where(take, x, gbest)
    gidx = tl.where(take, o, gidx)
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
    return gbest, gidx, sbest, sidx, m, s, t


@triton.jit
def _entropy_out(logit_ptr, probs_ptr, ent_ptr, row, V, inv_temp, m, s, t, offs, N_ELEMS, STRIDE: tl.constexpr, WRITE_PROBS: tl.constexpr):
    """A row's entropy from the online lanes, then (WRITE_PROBS) its probabilities in the probs dtype."""
    M = tl.max(m, axis=0)
    sc = tl.where(m == -float("inf"), 0.0, tl.exp(m - M))
    S = tl.sum(s * sc, axis=0)
    Tt = tl.sum(t * sc, axis=0)
    tl.store(ent_ptr + row, M + tl.log(S) - Tt / S)
    if WRITE_PROBS:
        for b in range(0, N_ELEMS, STRIDE):
            o = b + offs
            x, msk = _load_scaled(logit_ptr, row, V, o, inv_temp)
            tl.store(probs_ptr + row * V + o, (tl.exp(x - M) / S).to(probs_ptr.dtype.element_ty), mask=msk)
