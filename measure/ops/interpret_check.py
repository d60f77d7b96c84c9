"""The GPU kernels checked on a CPU: Triton's interpreter (TRITON_INTERPRET=1) runs the Triton
kernels on CPU tensors, so a refactor of a kernel can be checked where no GPU is lent (the suite
runs this from the vLLM environment, which has Triton). Checks the samplers against torch at a small
vocabulary (argmax, entropy, probabilities, the split sampler drawing the same random numbers as the
row sampler, near-zero temperature = greedy), checks the small-batch MoE GEMVs (one and two launches) and vLLM's own MoE kernel (lifted from its package) against a torch loop,
split-KV flash attention with each split merge and the lm_head GEMV's softcap epilogue, and runs the campaign's self-checks that fit a CPU
(q/k norm + RoPE in one launch, the fused norms, router top-k and GEMV, fp8 rowwise scaled_mm).
Timing needs the GPU: nothing here is timed.

    python -m measure.ops.interpret_check        # one JSON line; exit 1 if any check fails
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

CAMPAIGN_CHECKS = ("_check_qk_1launch", "_check_norm_fused", "_check_router", "_check_scaled_mm")
TOL = 0.02  # bf16 probabilities and fp32 entropies against torch
TOL_FP8 = 0.05  # a kernel on e4m3 activations against torch on the same quantised inputs (rounding of its bf16 intermediates)


def _rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


def sampler_errors(rows: int = 3, vocab: int = 5000, temp: float = 0.8, seed: int = 7) -> dict[str, float]:
    """Each sampler's worst disagreement with torch (and with the row sampler where it draws the same
    random numbers): 0 for token mismatches, relative error for entropies and probabilities."""
    import torch

    from measure.ops.triton_kernels import fused as tf
    from measure.ops.triton_kernels import basic as tk

    torch.manual_seed(0)
    lg = (torch.randn(rows, vocab) * 3).to(torch.bfloat16)
    lp = torch.log_softmax(lg.float() / temp, -1)
    ref_ent, argmax = -(lp.exp() * lp).sum(-1), lg.float().argmax(-1)

    def ints(*pairs) -> float:
        return float(sum(int((a.long() != b.long()).sum()) for a, b in pairs))

    def empty(dtype=torch.int32):
        return torch.full((rows,), -1, dtype=dtype)

    out = {}
    pr = torch.empty(rows, vocab, dtype=torch.bfloat16)
    g, s, ent = tk.sample_rows(lg, temp, seed, probs=pr)
    out["rows:greedy_mismatch"] = ints((g, argmax))
    out["rows:entropy_err"] = _rel(ent, ref_ent)
    out["rows:probs_err"] = _rel(pr, lp.exp())
    g2, s2 = tf.sample_rows_split(lg.float(), temp, seed, empty(), empty(), chunk=2048, block=512)
    out["split:vs_rows_mismatch"] = ints((g2, g), (s2, s))
    pr4 = torch.empty(rows, vocab, dtype=torch.bfloat16)
    g4, s4, ent4 = tf.sample_rows_r4(lg, temp, seed, probs=pr4, q=256)
    out["r4:greedy_mismatch"] = ints((g4, argmax))
    out["r4:entropy_err"] = _rel(ent4, ref_ent)
    out["r4:probs_err"] = _rel(pr4, lp.exp())
    g4c, s4c, _ = tf.sample_rows_r4(lg, 1e-4, seed, q=256, entropy=False)
    out["r4:cold_sample_vs_greedy_mismatch"] = ints((s4c, g4c), (g4c, argmax))
    g5, s5 = tf.sample_rows_split_r4(lg.float(), temp, seed, empty(), empty(), chunk=2048, q=128)
    out["r4_split:greedy_mismatch"] = ints((g5, argmax))
    out["r4_split:sample_out_of_range"] = float(((s5 < 0) | (s5 >= vocab)).sum())
    pr6, ent6 = torch.empty(rows, vocab, dtype=torch.bfloat16), torch.empty(rows)
    g6, s6, _ = tf.sample_rows_dg_split(lg, temp, seed, pr6, ent6, empty(), empty(), chunk=1024, q=128, block=256)
    g4q, s4q, _ = tf.sample_rows_r4(lg, temp, seed, q=128)  # the same uniforms: chunks are multiples of 4 x q
    out["dg_split:vs_r4_rows_mismatch"] = ints((g6, g4q), (s6, s4q), (g6, argmax))
    out["dg_split:entropy_err"] = _rel(ent6, ref_ent)
    out["dg_split:probs_err"] = _rel(pr6, lp.exp())
    return out


def moe_gemv_errors(tokens: int = 3, experts: int = 8, d: int = 64, f: int = 48, topk: int = 2) -> dict[str, float]:
    """The small-batch MoE kernels (triton_kernels.fused: moe_gemv_gate_up + moe_gemv_down, two launches)
    against a per-token torch loop, bf16
    weights and e4m3 weights with per-channel scales (the reference on the same dequantised weights);
    f not a multiple of the block, so the masks are exercised."""
    import torch
    import torch.nn.functional as F

    from measure.ops.triton_kernels import fused as tf
    from measure.ops.kernels import quant_weight_channels

    torch.manual_seed(3)
    x = torch.randn(tokens, d).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts)[:topk] for _ in range(tokens)]).to(torch.int32)
    tw = torch.softmax(torch.randn(tokens, topk), -1)
    w1 = (torch.randn(experts, 2 * f, d) * d ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, d, f) * f ** -0.5).to(torch.bfloat16)
    out = {}
    for prec in ("bf16", "fp8"):
        if prec == "fp8":
            q1, s1 = quant_weight_channels(w1)
            q2, s2 = quant_weight_channels(w2)
            r1, r2 = q1.float() * s1[..., None], q2.float() * s2[..., None]
        else:
            q1, q2, s1, s2, r1, r2 = w1, w2, None, None, w1.float(), w2.float()
        ref = torch.zeros(tokens, d)
        for t in range(tokens):
            for j in range(topk):
                e = int(ids[t, j])
                h = x[t].float() @ r1[e].t()
                ref[t] += tw[t, j] * ((F.gelu(h[:f], approximate="tanh") * h[f:]) @ r2[e].t())
        ids_flat, tw_flat = ids.reshape(-1), tw.reshape(-1).contiguous()
        act = torch.empty(tokens * topk, f, dtype=torch.bfloat16)
        tf.moe_gemv_gate_up(x, q1, act, ids_flat, a_div=topk, w_scale=s1, block_n=16, block_k=32)
        got2 = tf.moe_gemv_down(act, q2, torch.empty(tokens, d, dtype=torch.bfloat16), ids_flat, tw_flat, topk=topk, w_scale=s2,
                                block_n=16, block_k=32)
        out[f"moe_gemv2:{prec}_err"] = _rel(got2, ref)
    return out


def vllm_moe_errors(d: int = 64, f: int = 48, topk: int = 2) -> dict[str, float]:
    """vLLM's own MoE kernel, lifted from the installed vllm package (measure/ops/vllm_source.py,
    the `vllm_fused_moe` candidates), against a per-token torch loop on the same dequantised weights
    and per-row quantised activations: on vLLM's aligned expert assignment (3 tokens, 8 experts) and
    its naive one (1 token, 16 experts: tokens x top-k x 4 <= experts). fp8 only: Triton 3.9's
    interpreter computes tl.dot on bf16 operands wrongly (a four-line kernel shows it), so the bf16
    launch is checked on the GPU, by the campaign's self-check (campaign._check_moe)."""
    import torch
    import torch.nn.functional as F

    from measure.ops import kernels, vllm_source
    from measure.ops.kernels import quant_rows

    vllm_source.lifted_module().CAPABILITY = 90  # as on an H100: vLLM's fp8 launches swap A and B at small BLOCK_M
    out = {}
    for tokens, experts in ((3, 8), (1, 16)):
        for prec in ("fp8",):
            p = {"m": tokens, "d": d, "experts": experts, "ffn": f, "topk": topk, "_interpret": True, "_device_name": "cpu"}
            torch.manual_seed(11)
            got = kernels._moe_vllm(dict(p), prec, torch.device("cpu"), prec == "fp8").run(0).float()
            torch.manual_seed(11)
            x, ids, tw, *_ = kernels._moe_inputs(p, torch.device("cpu"))
            w1, w2, s1, s2 = kernels._moe_weights(torch.device("cpu"), experts, d, f, prec == "fp8")
            r1, r2 = (w1.float() * s1[..., None], w2.float() * s2[..., None]) if prec == "fp8" else (w1.float(), w2.float())
            deq = (lambda t: (lambda q, s: q.float() * s)(*quant_rows(t))) if prec == "fp8" else (lambda t: t.float())
            xin = deq(x)
            ref = torch.zeros(tokens, d)
            for t in range(tokens):
                for j in range(topk):
                    e = int(ids[t, j])
                    h = (xin[t] @ r1[e].t()).to(torch.bfloat16).float()
                    act = (F.gelu(h[:f], approximate="tanh") * h[f:]).to(torch.bfloat16)
                    ref[t] += tw[t, j] * (deq(act[None])[0] @ r2[e].t())
            out[f"vllm_fused_moe:{prec}:t{tokens}e{experts}_err"] = _rel(got, ref)
    return out


def flash_gemv_errors() -> dict[str, float]:
    """Split-KV flash attention with each way of merging the splits (torch ops, a combine launch, the
    last split program by an arrival counter: run twice on the same buffers, so the counters must be
    reset) against softmax(QK^T)V, and the lm_head GEMV with the softcap in its epilogue against
    torch, at small shapes."""
    import torch

    from measure.ops.triton_kernels import fused as tf
    from measure.ops.triton_kernels.basic import flash_gqa

    torch.manual_seed(5)
    out = {}
    M, qlen, L, D, splits, bm = 4, 2, 200, 64, 4, 16
    q, k, v = (torch.randn(2, n, D, dtype=torch.float16) for n in (M, L, L))  # the interpreter's tl.dot mishandles bf16 (numpy has none)
    sc = (q.float() @ k.float().transpose(1, 2)) * D ** -0.5
    ii = (torch.arange(M) % qlen)[:, None]
    sc = sc.masked_fill(torch.arange(L)[None, :] > (L - qlen) + ii, float("-inf"))
    ref = torch.softmax(sc, -1) @ v.float()
    for comb in ("torch", "triton"):
        ws = (torch.empty(2 * splits * M), torch.empty(2 * splits * M), torch.empty(2 * splits * M * D))
        for i in range(2):
            got = flash_gqa(q, k, v, qlen, True, splits=splits, block_m=bm, block_n=16, num_warps=4, num_stages=1, ws=ws, combine=comb)
            out[f"flash_{comb}:{i}_err"] = _rel(got, ref)
    x = torch.randn(3, 96, dtype=torch.bfloat16)
    w = torch.randn(200, 96, dtype=torch.bfloat16) * 4
    y = tf.gemv(x, w, torch.empty(3, 200), block_n=8, block_k=64, softcap=30.0)
    out["gemv_softcap_err"] = _rel(y, torch.tanh(x.float() @ w.float().t() / 30.0) * 30.0)
    return out


def campaign_checks() -> tuple[dict, dict]:
    """The campaign's own self-checks that fit a CPU: (results, kernels they would disable)."""
    import torch

    from measure.ops import campaign

    results, disabled = {}, {}
    for name in CAMPAIGN_CHECKS:
        getattr(campaign, name)(torch.device("cpu"), results, disabled)
    return results, disabled


def failures(samplers: dict[str, float], disabled: dict) -> list[str]:
    bad = [f"{k} = {v:.3g}" for k, v in samplers.items() if not (v < (TOL_FP8 if ":fp8:" in k else TOL) if k.endswith("_err") else v == 0)]
    return bad + [f"{k}: {v}" for k, v in disabled.items()]


def main() -> int:
    try:
        import triton  # noqa: F401
    except ImportError:
        print("error: Triton is not installed in this interpreter; run it with the vLLM environment's python "
              "(.venv-vllm/bin/python, `make vllm-env`)", file=sys.stderr)
        return 2
    samplers = {**sampler_errors(), **moe_gemv_errors(), **flash_gemv_errors(), **vllm_moe_errors()}
    results, disabled = campaign_checks()
    bad = failures(samplers, disabled)
    print(json.dumps({"samplers": samplers, "selfcheck": results, "failed": bad}, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
