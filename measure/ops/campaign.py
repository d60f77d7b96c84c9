"""The device campaign: every op of `shapes.all_ops` over its grid, each precision, fastest kernel
per shape, written row by row to OUT/ops.csv with OUT/meta.json (provenance, measured copy
bandwidth and matmul rates, the per-step overhead term, kernel self-checks, status, missing units).

    python -m measure.ops.campaign -o OUT --precisions bf16,fp8 --budget-s 420 [--grid full|smoke]

Interrupted or out of budget: every finished op stays in ops.csv, meta.json says `incomplete` and
lists the missing units; `--resume` continues (finished units are skipped).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
import traceback
from pathlib import Path

from costmodel.models import get_model
from measure.ops.shapes import OpDef, all_ops
from measure.ops.table import ANY, VOCAB_CHUNK, RowWriter, read_rows, unit_key

M_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
SEQS_DECODE = (1, 4, 16, 64, 256, 512)
SEQS_CANVAS = (1, 2, 4, 8, 16, 32, 64)
Q_CAUSAL = (1, 3, 5, 9, 64, 256, 1024, 4096, 8192)  # 3, 5: MTP verify (k+1 queries) between 1 and 9
CTX_FULL = (0, 128, 1024, 4096, 16384, 32768)
CTX_SLIDING = (0, 128, 512, 1024)
CTX_CANVAS_SLIDING = (0, 128, 512, 768)  # canvas keys = min(ctx + 256, 1024): flat from 768
MAX_TOKENS = 32768  # seqs x q
MAX_KV_TOKENS = 2**21  # seqs x (ctx + q): beyond this the table scales the nearest point (KV capacity bounds real shapes far below)
SMOKE = {"m": (1, 256, 4096), "seqs": (1, 64), "q": (1, 256), "ctx": (0, 1024)}


def grid_for(op: OpDef, smoke: bool = False) -> list[dict]:
    """Axis values at which `op` is timed."""
    p = op.p
    if op.family != "attn":
        top = VOCAB_CHUNK if op.family in ("lm_head", "dg_sampler", "ar_sampler") or op.name == "gemm.sc_embed" else max(M_GRID)
        if op.name.startswith("asst."):
            top = 1024  # the assistant drafts one token per sequence (batch <= 512)
        ms = SMOKE["m"] if smoke else M_GRID
        if op.family == "dg_sampler":
            ms = [m for m in ms if m < 256] + [m for m in (256, 512, 1024, 2048, 4096) if not smoke or m in SMOKE["m"]]
        return [{"m": m} for m in ms if m <= top]
    sliding = bool(p.get("window"))
    out = []
    if p["mask"] == "bidirectional":
        seqs_g = SMOKE["seqs"] if smoke else SEQS_CANVAS
        ctx_g = SMOKE["ctx"] if smoke else (CTX_CANVAS_SLIDING if sliding else CTX_FULL)
        for s in seqs_g:
            for c in ctx_g:
                if s * (c + 256) <= MAX_KV_TOKENS:
                    out.append({"seqs": s, "q": 256, "ctx": c})
        return out
    asst = op.name.startswith("asst.")
    q_g = (1,) if asst else (SMOKE["q"] if smoke else Q_CAUSAL)
    seqs_g = SMOKE["seqs"] if smoke else SEQS_DECODE
    ctx_g = SMOKE["ctx"] if smoke else (CTX_SLIDING if sliding else CTX_FULL)
    for q in q_g:
        for s in seqs_g:
            if s * q > MAX_TOKENS or (q >= 1024 and s > 4) or (q >= 64 and s > 64):
                continue
            for c in ctx_g:
                if s * (c + q) <= MAX_KV_TOKENS:
                    out.append({"seqs": s, "q": q, "ctx": c})
    return out


def plan_units(precisions: list[str], smoke: bool = False, model: str = "gemma4-26b-a4b") -> list[tuple[str, OpDef, dict]]:
    """(precision, op, axis values) in campaign order: the cheap small ops first, then MoE, GEMMs,
    lm_head and attention (the long tail a budget stop cuts); precision-independent ops once (precision '*'). `model`: the catalog target (its
    DiffusionGemma sibling shares every op; its MTP assistant adds the draft ops)."""
    from costmodel.models import ASSISTANT_FOR, get_model

    asst = ASSISTANT_FOR.get(model)
    ops = all_ops(get_model(model), get_model(asst) if asst else None).ops
    order = {"router": 0, "rmsnorm": 1, "norm_fused": 1, "act_mul": 2, "dg_sampler": 3, "ar_sampler": 4, "qk_norm_rope": 5, "embed": 6,
             "moe": 7, "gemm": 8, "gemm_act": 8, "lm_head": 9, "attn": 10, "moe_dense": 11}
    units = []
    for o in sorted(ops.values(), key=lambda o: (order.get(o.family, 99), o.name)):
        precs = [ANY] if o.precision_independent else precisions
        for pr in precs:
            for at in grid_for(o, smoke):
                units.append((pr, o, at))
    return units


def _params(op: OpDef, at: dict) -> dict:
    p = dict(op.p)
    p.update(at)
    return p


def _time_candidates(cands, params: dict, prec: str, dev, disabled: dict[str, str], res: dict, first_only: bool = False) -> None:
    """Build, quick-time and graph-time each candidate into res (timed, errors, details, methods);
    `first_only`: stop at the first that runs (a fallback takes the next kernel, not a search)."""
    import torch

    from measure.ops.timing import graph_ms, quick_ms

    for c in cands:
        if c.name in disabled:
            res["errors"][c.name] = disabled[c.name]
            continue
        if res["timed"] and c.name.startswith(("sdpa_math", "expert_loop")):
            continue  # last resorts: only when nothing faster ran
        try:
            b = c.build(params, prec, dev)
            est = quick_ms(b, dev)
            res["timed"][c.name], n, res["methods"][c.name] = graph_ms(b, dev, est)
            res["details"][c.name] = (b.detail, n)
            del b
        except Exception as e:  # recorded, never silent
            res["errors"][c.name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if first_only and res["timed"]:
            return


def time_unit(op: OpDef, at: dict, precision: str, dev, disabled: dict[str, str], choose: list[str] | None = None) -> dict:
    """Time the unit's kernels and keep the fastest. `choose`: the kernel set's kernels for it
    (timed alone; if none runs, the registry's next candidates in preference order until one does);
    without it every candidate (autotune). Returns a row (no gpu column); `source` says which."""
    from measure.ops import kernels

    prec = "bf16" if precision == ANY else precision
    params = _params(op, at)
    cands = [c for c in kernels.candidates(op.family, params, prec) if prec in c.precisions]
    res: dict = {"timed": {}, "errors": {}, "details": {}, "methods": {}}
    shipped = [c for n in (choose or []) for c in cands if c.name == n]
    if shipped:
        _time_candidates(shipped, params, prec, dev, disabled, res)
        source, names = "kernel set", [c.name for c in shipped]
        if not res["timed"]:
            rest = [c for c in cands if c not in shipped]
            _time_candidates(rest, params, prec, dev, disabled, res, first_only=True)
            source, names = "fallback: the kernel set's kernels failed, the next candidate taken", names + [c.name for c in rest]
    else:
        _time_candidates(cands, params, prec, dev, disabled, res)
        source = "autotuned" if not choose else "autotuned: none of the kernel set's kernels is a candidate here"
        names = [c.name for c in cands]
    timed, errors, details, methods = res["timed"], res["errors"], res["details"], res["methods"]
    row = {"precision": precision, "op": op.name, "family": op.family, **{k: at.get(k, "") for k in ("m", "seqs", "q", "ctx")}, "source": source}
    if not timed:
        row.update(kernel="", ms="", method="failed", candidates=json.dumps(errors),
                   fallback="; ".join(f"{k}: {v}" for k, v in errors.items()))
        return row
    best = min(timed, key=lambda k: timed[k])
    preferred_failed = [k for k in names[: names.index(best)] if k in errors]
    row.update(kernel=best, ms=f"{timed[best]:.6g}", n_in_graph=details[best][1], method=methods[best],
               candidates=json.dumps({k: (round(v, 5) if isinstance(v, float) else v) for k, v in {**timed, **errors}.items()}),
               fallback="; ".join(f"{k}: {errors[k]}" for k in preferred_failed), detail=details[best][0])
    return row


def _rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp(min=1e-12))


USED: dict = {"names": None}  # the kernels a campaign will time (None: every candidate): checks of others are skipped


def _is_used(names) -> bool:
    used = USED["names"]
    return used is None or any(n == u or n in u.split("+") for n in names for u in used)


def selfcheck(dev, only: str | None = None, used: set[str] | None = None) -> tuple[dict, dict[str, str]]:
    """Correctness of the fast kernels against references at one real shape; a failing candidate is
    disabled for the campaign (the rows then record it as a fallback). `only`: comma list of check
    names (moe, router_1launch, ...) or "none" (a stage whose kernels an earlier stage checked);
    `used`: the kernels the campaign will time (a kernel set's), the only ones checked."""
    USED["names"] = used
    out, disabled = {}, {}
    if dev.type != "cuda":
        return {"skipped": "not a CUDA device"}, disabled
    if only == "none":
        return {"skipped": "--checks none: this stage's kernels were self-checked by the stage that chose them"}, disabled
    for check in (_check_moe, _check_scaled_mm, _check_flash, _check_router, _check_gemv2, _check_norm_fused, _check_qk_1launch,
                  _check_gemm_act, _check_softcap, _check_router_1launch, _check_sampler_split, _check_sampler_r4, _check_pdl_chain, _check_qk_heads, _check_moe_prefill_tiles):
        if only and check.__name__[len("_check_"):] not in only.split(","):
            continue
        check(dev, out, disabled)
    return out, disabled


def _judge(out: dict, disabled: dict, key: str, names, error, tol: float = 0.01, where: str = "") -> None:
    """Run one self-check: `error()` returns the candidate's relative error against torch; it is
    recorded under `key`, and the candidates `names` are disabled when it is not below `tol` (NaN
    included) or the check raises. Skipped when none of `names` is used by this campaign."""
    if not _is_used(names):
        return
    try:
        out[key] = e = error()
        why = None if e < tol else f"disabled: self-check relative error {e:.3g}{where}"
    except Exception as ex:
        out[key] = f"{type(ex).__name__}: {str(ex)[:160]}"
        why = f"disabled: self-check failed: {type(ex).__name__}"
    if why:
        for n in names:
            disabled[n] = why


def _gemv_case(dev, m: int, prec: str, n: int = 1000, scale: float = 1.0, cap: float = 0.0):
    """(x [m, 2816] bf16, weights [n, 2816] (e4m3 in fp8), per-channel scales or None, the fp32
    reference on the dequantised weights, softcapped where cap > 0): the GEMV self-checks' case."""
    import torch

    from measure.ops import kernels

    x = torch.randn(m, 2816, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, 2816, device=dev, dtype=torch.bfloat16) * 2816 ** -0.5 * scale
    s = None
    if prec == "fp8":
        w, s = kernels.quant_weight_channels(w)
        s = s.contiguous()
    ref = x.float() @ (w.float() * (s[:, None] if s is not None else 1.0)).t()
    return x, w, s, (torch.tanh(ref / cap) * cap if cap else ref)


def _check_gemv2(dev, out: dict, disabled: dict) -> None:
    """The dense Triton GEMV (bf16 and fp8 w8a16, every config) against torch.mm on the same
    (dequantised) weights; a config that fails is disabled."""
    import torch

    from measure.ops import kernels
    from measure.ops.triton_kernels.configs import gemv_configs

    try:
        from measure.ops.triton_kernels.fused import gemv
    except Exception as ex:
        out["gemv2"] = f"{type(ex).__name__}: {str(ex)[:160]}"
        return
    for m in (1, 2, 3, 8):
        for prec in ("bf16", "fp8"):
            for c, cfg in zip(kernels.gemv2_candidates(m, prec), gemv_configs(m)):
                def error(m=m, prec=prec, cfg=cfg) -> float:
                    torch.manual_seed(13)
                    x, w, s, ref = _gemv_case(dev, m, prec)
                    y = torch.empty(m, 1000, device=dev, dtype=torch.bfloat16).fill_(float("nan"))
                    gemv(x, w, y, s, block_n=cfg[0], block_k=cfg[1], num_warps=cfg[2])
                    return _rel(y, ref)

                _judge(out, disabled, f"{prec}:{c.name}:m{m}", (c.name,), error, where=f" at m={m}")


def _router_reference(x, W, topk):
    import torch

    h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * x.shape[1] ** -0.5
    rw, ri = torch.topk(torch.softmax(h @ W.float().t(), -1), topk)
    return rw / rw.sum(-1, keepdim=True), ri


def _check_router_1launch(dev, out: dict, disabled: dict) -> None:
    """The one-launch routers (GEMV + last-program top-k, m <= 8; tensor-core dot + top-k epilogue,
    any m) against softmax + topk in fp32; the GEMV one over 20 back-to-back launches (its arrival
    counter must come back to zero, and no launch may see another's partial logits)."""
    import torch

    from measure.ops import kernels

    for name, cfg, ms in ([(f"triton_router_1launch[{'/'.join(map(str, c))}]", c, (1, 3, 8)) for c in kernels.ROUTER_1L_CFGS]
                          + [(f"triton_router_dot[{'/'.join(map(str, c))}]", c, (1, 33, 300)) for c in kernels.ROUTER_DOT_CFGS]):
        def error(name=name, cfg=cfg, ms=ms) -> float:
            from measure.ops.triton_kernels.fused import router_dot_topk, router_gemv_topk

            worst = 0.0
            for m in ms:
                torch.manual_seed(31 + m)
                W = (torch.randn(128, 2816, device=dev) * 2816 ** -0.5).to(torch.bfloat16)
                scratch: dict = {}
                for rep in range(20 if "1launch" in name else 2):
                    x = torch.randn(m, 2816, device=dev, dtype=torch.bfloat16)
                    w = torch.full((m, 8), float("nan"), device=dev)
                    i = torch.full((m, 8), -1, device=dev, dtype=torch.int32)
                    if "1launch" in name:
                        router_gemv_topk(x, W, w, i, scratch, block_n=cfg[0], block_k=cfg[1], num_warps=cfg[2])
                    else:
                        router_dot_topk(x, W, w, i, block_m=cfg[0], block_k=cfg[1], num_warps=cfg[2])
                    rw, ri = _router_reference(x, W, 8)
                    match = float((torch.sort(i.long(), -1)[0] == torch.sort(ri, -1)[0]).float().mean())
                    worst = max(worst, _rel(w, rw), 1.0 - match)
                if "1launch" in name and int(scratch["cnt"].item()) != 0:
                    return float("inf")
            return worst

        _judge(out, disabled, f"router:{name}", (name,), error, tol=0.02)


def _sampler_case(dev, m: int):
    """m rows of random fp32 logits over the 262k vocabulary, and greedy / sample outputs set to -1."""
    import torch

    lg = torch.randn(m, 262144, device=dev) * 3.0
    return lg, torch.full((m,), -1, device=dev, dtype=torch.int32), torch.full((m,), -1, device=dev, dtype=torch.int32)


def _check_sampler_split(dev, out: dict, disabled: dict) -> None:
    """The split-row AR sampler against the one-program-per-row kernel: the same greedy and sampled
    token for every row (same in-kernel random numbers), greedy = torch argmax."""
    import torch

    for chunk in (2048, 8192):
        name = f"triton_ar_sampler_split[{chunk}]"

        def error(chunk=chunk) -> float:
            from measure.ops.triton_kernels.fused import sample_rows_split
            from measure.ops.triton_kernels.basic import sample_rows

            torch.manual_seed(37)
            bad = 0
            for m in (1, 5, 64):
                lg, g, s = _sampler_case(dev, m)
                sample_rows_split(lg, 0.7, 1234, g, s, chunk=chunk)
                rg, rs, _ = sample_rows(lg, 0.7, 1234, entropy=False)
                bad += int((g != rg).sum()) + int((s != rs).sum()) + int((g.long() != lg.argmax(-1)).sum())
            return float(bad)

        _judge(out, disabled, f"sampler:{name}:mismatches", (name,), error, tol=0.5)


def _check_sampler_r4(dev, out: dict, disabled: dict) -> None:
    """The rand4x samplers (their random numbers differ from the reference kernel's): greedy = torch
    argmax; entropy and bf16 probabilities against torch; at a near-zero temperature the sample is
    the greedy token; and over 8192 rows of one 8-way distribution the sampled frequencies match
    its softmax (max deviation < 0.02). The split DiffusionGemma sampler, every chunk size, also
    against the row sampler's tokens (the same uniforms)."""
    import torch

    from measure.ops import kernels

    def error(kind: str) -> float:
        from measure.ops.triton_kernels.fused import sample_rows_dg_split, sample_rows_r4, sample_rows_split_r4

        torch.manual_seed(43)
        worst = 0.0
        for m in (1, 7, 64):
            lg, g, s = _sampler_case(dev, m)
            if kind == "split":
                sample_rows_split_r4(lg, 0.7, 5, g, s)
            elif kind == "dg_split":  # every chunk size: the row sampler's tokens (same uniforms), torch's entropy and probabilities
                lp = torch.log_softmax(lg / 0.6, -1)
                g0, s0, _ = sample_rows_r4(lg, 0.6, 5, q=512, num_warps=4)
                for c in kernels.DG_SPLIT_CHUNKS:
                    pr = torch.full((m, 262144), float("nan"), device=dev, dtype=torch.bfloat16)
                    ent = torch.full((m,), float("nan"), device=dev)
                    sample_rows_dg_split(lg, 0.6, 5, pr, ent, g, s, chunk=c)
                    worst = max(worst, _rel(pr, lp.exp()), _rel(ent, -(lp.exp() * lp).sum(-1)), float((g != g0).sum() + (s != s0).sum()))
            else:
                pr = torch.full((m, 262144), float("nan"), device=dev, dtype=torch.bfloat16)
                ent = torch.full((m,), float("nan"), device=dev)
                sample_rows_r4(lg, 0.6, 5, probs=pr, ent=ent, greedy=g, sample=s)
                lp = torch.log_softmax(lg / 0.6, -1)
                worst = max(worst, _rel(pr, lp.exp()), _rel(ent, -(lp.exp() * lp).sum(-1)))
            worst = max(worst, float((g.long() != lg.argmax(-1)).sum()), float(((s < 0) | (s >= 262144)).sum()))
            if kind == "split":
                sample_rows_split_r4(lg, 1e-4, 9, g, s)
            elif kind == "dg_split":
                sample_rows_dg_split(lg, 1e-4, 9, torch.empty(m, 262144, device=dev, dtype=torch.bfloat16), torch.empty(m, device=dev), g, s)
            else:
                sample_rows_r4(lg, 1e-4, 9, greedy=g, sample=s, entropy=False)
            worst = max(worst, float((s != g).sum()))
        base = torch.randn(8, device=dev)
        lg = base.repeat(8192, 1).contiguous()
        g = torch.empty(8192, device=dev, dtype=torch.int32)
        s = torch.empty(8192, device=dev, dtype=torch.int32)
        if kind == "split":
            sample_rows_split_r4(lg, 1.0, 11, g, s)
        elif kind == "dg_split":
            sample_rows_dg_split(lg, 1.0, 11, torch.empty(8192, 8, device=dev, dtype=torch.bfloat16), torch.empty(8192, device=dev), g, s, chunk=4096)
        else:
            sample_rows_r4(lg, 1.0, 11, greedy=g, sample=s, entropy=False)
        freq = torch.bincount(s.long(), minlength=8).float() / 8192
        return max(worst, float((freq - torch.softmax(base, -1)).abs().max()) / 0.02 * 0.01)

    _judge(out, disabled, "sampler_r4_split", ("triton_ar_sampler_split_r4[4096]",), lambda: error("split"), tol=0.01)
    _judge(out, disabled, "sampler_r4_rows", ("triton_ar_sampler_r4", "triton_dg_sampler_r4"), lambda: error("rows"), tol=0.01)
    _judge(out, disabled, "sampler_dg_split", [f"triton_dg_sampler_split_r4[{c}]" for c in kernels.DG_SPLIT_CHUNKS], lambda: error("dg_split"),
           tol=0.01)


def pdl_candidate_names() -> set[str]:
    from measure.ops import kernels

    names = set()
    moe_p = {"d": 2816, "experts": 128, "ffn": 704, "topk": 8}
    for m in (1, 2, 3, 4, 8):
        for prec in ("bf16", "fp8"):
            for fam, p in (("gemm", {"k": 2816, "n": 1024}), ("gemm_act", {"k": 2816, "f": 704}), ("moe", moe_p), ("router", {}),
                           ("norm_fused", {}), ("qk_norm_rope", {})):
                names |= {c.name for c in kernels.candidates(fam, {**p, "m": m}, prec) if "_pdl" in c.name or "_pf[" in c.name}
    return names


def _bf16_randn(dev, *shape, sc: float = 1.0):
    import torch

    return (torch.randn(*shape, device=dev) * sc).to(torch.bfloat16)


def _pdl_chain_weights(dev, w8: bool, d: int = 2816, e: int = 128, f: int = 704, fd: int = 2112) -> tuple[dict, dict, list]:
    """A decode layer's FFN-block weights for the PDL chain check (QKV GEMV, router, MoE gate_up and
    down, dense gate_up and down; fp8 with per-channel scales when w8), their scales, 4 norm weights."""
    from measure.ops import kernels

    W = {"q": _bf16_randn(dev, 8192, d, sc=d ** -0.5), "r": _bf16_randn(dev, e, d, sc=d ** -0.5),
         "w1": _bf16_randn(dev, e, 2 * f, d, sc=d ** -0.5), "w2": _bf16_randn(dev, e, d, f, sc=f ** -0.5),
         "g": _bf16_randn(dev, 1, 2 * fd, d, sc=d ** -0.5), "dn": _bf16_randn(dev, d, fd, sc=fd ** -0.5)}
    S = {}
    if w8:
        for k_ in ("q", "w1", "w2", "g", "dn"):
            W[k_], S[k_] = kernels.quant_weight_channels(W[k_])
            S[k_] = S[k_].contiguous()
    return W, S, [_bf16_randn(dev, d, sc=0.1) for _ in range(4)]


def _pdl_chain_buffers(dev, m: int, d: int, f: int, fd: int) -> dict:
    """The chain's intermediate tensors (one set per launch mode, so the two can be compared)."""
    import torch

    bf = dict(device=dev, dtype=torch.bfloat16)
    return {"o1": torch.empty(m, d, **bf), "o2": torch.empty(m, d, **bf), "res": torch.empty(m, d, **bf), "y": torch.empty(m, 8192, **bf),
            "tw": torch.empty(m, 8, device=dev), "ids": torch.empty(m, 8, device=dev, dtype=torch.int32), "act": torch.empty(8 * m, f, **bf),
            "moe": torch.empty(m, d, **bf), "actd": torch.empty(m, fd, **bf), "dn": torch.empty(m, d, **bf), "o3": torch.empty(m, d, **bf),
            "z": torch.zeros(m, device=dev, dtype=torch.int32), "ws": {}}


def _check_pdl_chain(dev, out: dict, disabled: dict) -> None:
    """The kernels launched with programmatic dependent launch (each lets the next kernel launch at
    its start and waits for the previous kernel's results before reading them) chained as a decode
    layer's FFN block runs them (norms -> GEMV -> router -> MoE gate_up -> MoE down -> dense gate_up ->
    down GEMV -> norms), in one CUDA graph, against the same chain launched plainly: identical
    outputs over 8 replays with fresh inputs (bf16 and fp8 weights), for every launch mode of the
    MoE GEMV pair (triton_kernels.fused.MOE_GEMV2_MODES: the L2 prefetches must not change a bit); a
    mismatch or failure disables every _pdl candidate and every MoE pair of the new modes."""
    import torch

    def error() -> float:
        from measure.ops.triton_kernels.fused import MOE_GEMV2_MODES, gemv, moe_gemv2, moe_gemv_gate_up, norm_fused, router_gemv_topk

        worst = 0.0
        for w8 in (False, True):
            torch.manual_seed(47)
            m, d = 1, 2816
            W, S, nw = _pdl_chain_weights(dev, w8)
            a, res = _bf16_randn(dev, m, d), _bf16_randn(dev, m, d)
            bufs = {}

            def chain(mode: str):
                pdl = MOE_GEMV2_MODES[mode][0]
                b = bufs.setdefault(mode, _pdl_chain_buffers(dev, m, d, f=704, fd=2112))
                b["res"].copy_(res)
                norm_fused(a, b["res"], nw[0], nw[1], b["o1"], wo2=nw[2], o2=b["o2"], pdl=pdl)
                gemv(b["o1"], W["q"], b["y"], S.get("q"), block_n=8, block_k=1024, pdl=pdl)
                router_gemv_topk(b["o2"], W["r"], b["tw"], b["ids"], b["ws"], block_n=1, block_k=2048, pdl=pdl)
                moe_gemv2(b["o2"], W["w1"], W["w2"], b["act"], b["moe"], b["ids"].view(-1), b["tw"].view(-1), topk=8, s1=S.get("w1"),
                          s2=S.get("w2"), cfg_up=(4, 4096, 4), cfg_down=(4, 1024, 4), mode=mode)
                moe_gemv_gate_up(b["o1"], W["g"], b["actd"], b["z"], a_div=1, w_scale=S.get("g"), block_n=4, block_k=4096, pdl=pdl)
                gemv(b["actd"], W["dn"], b["dn"], S.get("dn"), block_n=2, block_k=4096, pdl=pdl)
                norm_fused(b["moe"], b["res"], nw[3], nw[0], b["o3"], b=b["dn"], wb=nw[1], ws=nw[2], pdl=pdl)

            graphs = {}
            for mode in MOE_GEMV2_MODES:
                chain(mode)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    chain(mode)
                graphs[mode] = g
            for _ in range(8):
                a.copy_(_bf16_randn(dev, m, d))
                res.copy_(_bf16_randn(dev, m, d))
                for g in graphs.values():
                    g.replay()
                torch.cuda.synchronize()
                for mode in graphs:
                    for k_ in ("o1", "o2", "y", "tw", "ids", "act", "moe", "actd", "dn", "o3", "res"):
                        x0, x1 = bufs["plain"][k_].float(), bufs[mode][k_].float()
                        if not torch.isfinite(x1).all():
                            return float("inf")
                        worst = max(worst, float((x0 - x1).abs().max()))
        return worst

    _judge(out, disabled, "pdl_chain_max_abs_diff", sorted(pdl_candidate_names()), error, tol=1e-6)


def _check_qk_heads(dev, out: dict, disabled: dict) -> None:
    """q/k norm + RoPE with all heads of a token per program against the per-tensor kernel (head
    dims 256 and 512, with and without k)."""
    import torch

    def error() -> float:
        from measure.ops.triton_kernels.fused import qk_norm_rope3
        from measure.ops.triton_kernels.basic import qk_norm_rope

        errs = []
        for hq, hk, hd in ((16, 8, 256), (16, 2, 512), (16, 0, 256)):
            torch.manual_seed(41)
            q = torch.randn(9, hq, hd, device=dev, dtype=torch.bfloat16)
            k = torch.randn(9, hk, hd, device=dev, dtype=torch.bfloat16) if hk else None
            wq = (torch.randn(hd, device=dev) * 0.1).to(torch.bfloat16)
            wk = (torch.randn(hd, device=dev) * 0.1).to(torch.bfloat16)
            pos = torch.arange(50, 59, device=dev, dtype=torch.int32)
            rq = qk_norm_rope(q.clone(), wq, pos)
            rk = qk_norm_rope(k.clone(), wk, pos) if hk else None
            qk_norm_rope3(q, k, wq, wk, pos)
            errs.append(_rel(q, rq))
            if hk:
                errs.append(_rel(k, rk))
        return max(errs)

    _judge(out, disabled, "qk_norm_rope_heads_err", ("triton_qk_norm_rope_heads",), error)


def _check_moe_prefill_tiles(dev, out: dict, disabled: dict) -> None:
    """The fused-MoE tile pairs tried only at prefill densities (>= 24 routed rows per expert),
    which _check_moe (64 and 8 tokens) does not reach: at 512 tokens against the expert loop."""
    from measure.ops import kernels

    p = {"m": 512, "d": 2816, "experts": 128, "ffn": 704, "topk": 8}
    seen = {c.name for mm in (64, 8) for f8 in ("bf16", "fp8") for c in kernels.moe_candidates({**p, "m": mm}, f8)}
    for prec in ("bf16", "fp8"):
        _check_moe_candidates(dev, out, disabled, p, prec, lambda c: c.name not in seen and "_tma[" in c.name)


def _check_gemm_act(dev, out: dict, disabled: dict) -> None:
    """The fused gate_up + gelu*up GEMV (bf16 and fp8 w8a16, every config) against torch on the same
    (dequantised) weights."""
    import torch
    import torch.nn.functional as F

    from measure.ops import kernels

    for prec in ("bf16", "fp8"):
        for c in kernels.gemm_act_candidates({"m": 3}, prec):
            if "gate_up_act" not in c.name:
                continue

            def error(prec=prec, c=c) -> float:
                from measure.ops.triton_kernels.fused import moe_gemv_gate_up

                torch.manual_seed(23)
                x = torch.randn(3, 2816, device=dev, dtype=torch.bfloat16)
                w = torch.randn(1, 2 * 704, 2816, device=dev, dtype=torch.bfloat16) * 2816 ** -0.5
                s = None
                if prec == "fp8":
                    w, s = kernels.quant_weight_channels(w)
                h = x.float() @ (w[0].float() * (s[0][:, None] if s is not None else 1)).t()
                ref = F.gelu(h[:, :704], approximate="tanh") * h[:, 704:]
                act = torch.full((3, 704), float("nan"), device=dev, dtype=torch.bfloat16)
                bn, bk, nw = (int(v) for v in c.name.split("[")[1].rstrip("]").split("/"))
                moe_gemv_gate_up(x, w, act, torch.zeros(3, device=dev, dtype=torch.int32), a_div=1, w_scale=s,
                                 block_n=bn, block_k=bk, num_warps=nw)
                return _rel(act, ref)

            _judge(out, disabled, f"{prec}:{c.name}", (c.name,), error)


def _check_softcap(dev, out: dict, disabled: dict) -> None:
    """The one-launch logit softcap against torch's tanh."""
    import torch

    def error() -> float:
        from measure.ops.triton_kernels.fused import softcap

        torch.manual_seed(29)
        y = (torch.randn(3, 262144, device=dev) * 40).to(torch.bfloat16)
        got = softcap(y, torch.full((3, 262144), float("nan"), device=dev), 30.0)
        return _rel(got, torch.tanh(y.float() / 30.0) * 30.0)

    _judge(out, disabled, "softcap_err", ("cublas_bf16+triton_softcap", "scaled_mm_rowwise+triton_softcap"), error, tol=1e-4)
    from measure.ops import kernels

    for prec in ("bf16", "fp8"):  # the lm_head GEMVs with the softcap in their epilogue, every config and m
        for m in (1, 3, 8):
            def gemv_error(prec=prec, m=m) -> float:
                from measure.ops.triton_kernels.fused import gemv
                from measure.ops.triton_kernels.configs import gemv_configs

                torch.manual_seed(31)
                x, w, s, ref = _gemv_case(dev, m, prec, n=5000, scale=40, cap=30.0)
                worst = 0.0
                for cfg in gemv_configs(m):
                    for pdl in (False, True):
                        got = gemv(x, w, torch.full((m, 5000), float("nan"), device=dev), s, block_n=cfg[0], block_k=cfg[1],
                                   num_warps=cfg[2], pdl=pdl, softcap=30.0)
                        worst = max(worst, _rel(got, ref))
                return worst

            _judge(out, disabled, f"{prec}:gemv_softcap_err:m{m}", [c.name for c in kernels.gemv2_candidates(m, prec, softcap=30.0)],
                   gemv_error, tol=0.01 if prec == "bf16" else 0.02, where=f" at m={m}")


def _check_norm_fused(dev, out: dict, disabled: dict) -> None:
    """The fused norms (both layouts) against the torch reference on the same inputs."""
    import torch

    from measure.ops import kernels

    def error() -> float:
        from measure.ops.triton_kernels.fused import norm_fused

        errs = []
        for ins, outs in ((1, 2), (2, 1), (1, 1)):
            torch.manual_seed(17)
            p = {"d": 2816, "m": 33, "ins": ins, "outs": outs}
            t = kernels._norm_inputs(p, dev)
            ref = {k: v.clone() for k, v in t.items()}
            for k in ("o1", "o2"):
                if k in t:
                    t[k].fill_(float("nan"))
            norm_fused(t["a"], t["res"], t["wa"], t["wo1"], t["o1"], t.get("b"), t.get("wb"), t.get("ws"), t.get("wo2"), t.get("o2"))
            b = _torch_norms(ref, ins, outs)
            errs += [_rel(t["res"], b["res"]), _rel(t["o1"], b["o1"])] + ([_rel(t["o2"], b["o2"])] if outs == 2 else [])
        return max(errs)

    _judge(out, disabled, "norm_fused_max_err", ("triton_norm_fused",), error, tol=0.02)


def _torch_norms(t: dict, ins: int, outs: int) -> dict:
    import torch

    def nrm(x, w):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w.float())

    y = nrm(t["a"], t["wa"])
    if ins == 2:
        y = nrm(y + nrm(t["b"], t["wb"]), t["ws"])
    h = t["res"].float() + y
    r = {"res": h, "o1": nrm(h, t["wo1"])}
    if outs == 2:
        r["o2"] = nrm(h, t["wo2"])
    return r


def _check_qk_1launch(dev, out: dict, disabled: dict) -> None:
    """q/k norm + RoPE in one launch against the per-tensor kernel."""
    import torch

    def error() -> float:
        from measure.ops.triton_kernels.fused import qk_norm_rope2
        from measure.ops.triton_kernels.basic import qk_norm_rope

        torch.manual_seed(19)
        q = torch.randn(7, 16, 256, device=dev, dtype=torch.bfloat16)
        k = torch.randn(7, 8, 256, device=dev, dtype=torch.bfloat16)
        wq, wk = torch.randn(256, device=dev) * 0.1, torch.randn(256, device=dev) * 0.1
        wq, wk = wq.to(torch.bfloat16), wk.to(torch.bfloat16)
        pos = torch.arange(100, 107, device=dev, dtype=torch.int32)
        rq, rk = qk_norm_rope(q.clone(), wq, pos), qk_norm_rope(k.clone(), wk, pos)
        qk_norm_rope2(q, k, wq, wk, pos)
        return max(_rel(q, rq), _rel(k, rk))

    _judge(out, disabled, "qk_norm_rope_1launch_err", ("triton_qk_norm_rope_1launch",), error)


def _check_moe(dev, out: dict, disabled: dict) -> None:
    """Self-check of the fused-MoE variants (bf16 and fp8, sort-and-pad and GEMV) against the per-expert loop.
    Results into `out`, failures into `disabled`."""
    from measure.ops.kernels import VLLM_MOE  # imports torch

    for m in (64, 8, 2):  # m = 2: vLLM's MoE on its naive expert assignment (tokens x top-k x 4 <= experts)
        p = {"m": m, "d": 2816, "experts": 128, "ffn": 704, "topk": 8}
        for prec in ("bf16", "fp8"):
            _check_moe_candidates(dev, out, disabled, p, prec,
                                  lambda c, m=m: c.name.startswith(VLLM_MOE) if m == 2 else
                                  not ("loop" in c.name or "bf16 (fp8" in c.name or (m == 8) != ("gemv" in c.name)))


def _check_moe_candidates(dev, out: dict, disabled: dict, p: dict, prec: str, wanted) -> None:
    """Each MoE candidate `wanted` picks at shape p against the per-expert loop (fp8: the loop on the
    same quantised weights, dequantised; the grouped bf16 path cannot see them)."""
    import torch  # heavy, optional: only the GPU campaign needs it

    from measure.ops import kernels  # imports torch

    for c in kernels.moe_candidates(p, prec):
        if not wanted(c):
            continue

        def error(c=c) -> float:
            torch.manual_seed(7)
            got = c.build(dict(p), prec, dev).run(0)
            torch.manual_seed(7)
            ref = _moe_fp8_reference(p, dev) if prec == "fp8" else kernels._moe_loop(dict(p), prec, dev).run(0)
            return _rel(got, ref)

        _judge(out, disabled, f"{prec}:{c.name}:m{p['m']}", (c.name,), error, tol=0.08 if prec == "fp8" else 0.02, where=f" at m={p['m']}")
        torch.cuda.empty_cache()


def _check_scaled_mm(dev, out: dict, disabled: dict) -> None:
    """Self-check of fp8 rowwise _scaled_mm against the bf16 GEMM.
    Results into `out`, failures into `disabled`."""
    import torch  # heavy, optional: only the GPU campaign needs it

    from measure.ops import kernels  # imports torch

    def error() -> float:
        torch.manual_seed(3)
        x = torch.randn(64, 2816, device=dev, dtype=torch.bfloat16)
        w = torch.randn(4096, 2816, device=dev, dtype=torch.bfloat16) * 2816 ** -0.5
        wq, s = kernels.quant_weight_channels(w)
        xq, xs = kernels.quant_rows(x)
        y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=s.view(1, -1), out_dtype=torch.bfloat16)
        return _rel(y, x @ w.t())

    _judge(out, disabled, "fp8:scaled_mm_rowwise", ("scaled_mm_rowwise",), error, tol=0.08)


def _check_flash(dev, out: dict, disabled: dict) -> None:
    """Self-check of the Triton flash attention (GQA packed, split-KV) against a float reference.
    Results into `out`, failures into `disabled`."""
    import torch  # heavy, optional: only the GPU campaign needs it

    def error() -> float:
        from measure.ops.triton_kernels.basic import flash_gqa

        errs = []
        for (M, qlen, L, causal, splits, D) in [(8, 1, 4096, False, 8, 512), (4096, 256, 1280, True, 1, 512), (2048, 256, 1280, False, 1, 512),
                                                (16, 2, 3000, True, 4, 512), (512, 256, 300, True, 1, 256)]:
            torch.manual_seed(11)
            qq = torch.randn(2, M, D, device=dev, dtype=torch.bfloat16)
            kk = torch.randn(2, L, D, device=dev, dtype=torch.bfloat16)
            vv = torch.randn(2, L, D, device=dev, dtype=torch.bfloat16)
            sc = (qq.float() @ kk.float().transpose(1, 2)) * D ** -0.5
            if causal:
                ii = (torch.arange(M, device=dev) % qlen)[:, None]
                jj = torch.arange(L, device=dev)[None, :]
                sc = sc.masked_fill(jj > (L - qlen) + ii, float("-inf"))
            ref = torch.softmax(sc, -1) @ vv.float()
            for cfg in ((32, 32, 8, 2), (16, 64, 4, 2), (16, 32, 4, 2)):
                for comb in ("torch", "triton"):
                    sp = splits * (1 if comb == "torch" else 8)
                    got = flash_gqa(qq, kk, vv, qlen, causal, splits=sp, block_m=cfg[0], block_n=cfg[1], num_warps=cfg[2],
                                    num_stages=cfg[3], combine=comb)
                    errs.append(_rel(got, ref))
        return max(errs)

    _judge(out, disabled, "triton_flash_gqa_max_err",
           ("triton_flash_gqa", "triton_flash_gqa_m16", "triton_flash_decode_m16", "triton_flash_decode_m16n32"), error, tol=0.02)


def _check_router(dev, out: dict, disabled: dict) -> None:
    """Self-check of the fused router top-k against softmax + topk, and of the router GEMV configs
    against a float GEMM. Results into `out`, failures into `disabled`."""
    import torch  # heavy, optional: only the GPU campaign needs it

    torch.manual_seed(5)
    x = torch.randn(32, 2816, device=dev, dtype=torch.bfloat16)
    W = torch.randn(128, 2816, device=dev, dtype=torch.bfloat16) * 2816 ** -0.5

    def topk_error() -> float:
        from measure.ops.triton_kernels.basic import router_topk

        w, i = router_topk(x, x @ W.t(), 8)
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * 2816 ** -0.5
        rw, ri = torch.topk(torch.softmax(h @ W.float().t(), -1), 8)
        out["router_topk_index_match"] = float((torch.sort(i.long(), -1)[0] == torch.sort(ri, -1)[0]).float().mean())
        return _rel(w, rw / rw.sum(-1, keepdim=True))

    def gemv_error(cfg) -> float:
        from measure.ops.triton_kernels.fused import gemv

        lg = torch.empty(4, 128, device=dev, dtype=torch.bfloat16)
        gemv(x[:4], W, lg, block_n=cfg[0], block_k=cfg[1], num_warps=cfg[2])
        return _rel(lg, x[:4].float() @ W.float().t())

    _judge(out, disabled, "router_topk_weight_err", ("triton_router",), topk_error, tol=0.05)
    for cfg in ((1, 4096, 4), (2, 2048, 4)):
        _judge(out, disabled, f"router_gemv_{cfg[0]}_err", (f"triton_router_gemv[{'/'.join(map(str, cfg))}]",), lambda cfg=cfg: gemv_error(cfg))


def _moe_fp8_reference(p, dev):
    import torch
    import torch.nn.functional as F

    from measure.ops import kernels

    x, ids, tw, m, d, e, f, topk = kernels._moe_inputs(p, dev)
    w1, w2, _, _ = kernels._moe_weights(dev, e, d, f, False)  # the candidate's draws before it quantises them
    out = torch.zeros(m, d, device=dev, dtype=torch.float32)
    for ex in torch.unique(ids).tolist():
        tok, slot = (ids == ex).nonzero(as_tuple=True)
        h = x[tok].float() @ w1[ex].float().t()
        a = F.gelu(h[:, :f], approximate="tanh") * h[:, f:]
        out.index_add_(0, tok, (a @ w2[ex].float().t()) * tw[tok, slot, None])
    return out


def versions() -> dict:
    import importlib.metadata as md

    v = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("torch", "triton", "numpy"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    try:
        import torch

        v["cuda"] = torch.version.cuda
        v["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        pass
    return v


def _args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--precisions", default="bf16,fp8")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new units after this many seconds")
    ap.add_argument("--grid", choices=("full", "smoke"), default="full")
    ap.add_argument("--device", default=None)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--only", default=None, help="comma list of op families to time (default all)")
    ap.add_argument("--ops", default=None, help="comma list of op names to time (default all)")
    ap.add_argument("--skip-ops", default=None, help="comma list of op names not to time (a trailing * matches a prefix)")
    ap.add_argument("--m-max", type=int, default=None, help="skip token-op grid points above this many tokens (tests)")
    ap.add_argument("--limit", action="append", default=[], metavar="FAMILY:AXIS=MAX",
                    help="time FAMILY's units only up to AXIS <= MAX, or from AXIS >= MIN with FAMILY:AXIS>=MIN (repeatable; e.g. gemm:m=8 attn:q=9 moe:m>=512)")
    ap.add_argument("--m-list", default=None, help="comma list: time token ops only at these m (quick checks)")
    ap.add_argument("--max-units", type=int, default=None, help="stop after this many units (tests)")
    ap.add_argument("--model", default="gemma4-26b-a4b", help="catalog target model (tests: tiny-gemma4)")
    ap.add_argument("--checks", default=None, help="comma list of self-checks to run (default all), or none")
    ap.add_argument("--components", default=None,
                    help="op table whose kernel choices the moe_dense candidates build their parts with (default: this run's)")
    return ap.parse_args(argv)


def _select_units(a, precisions: list[str]) -> list:
    """The grid's units, narrowed by --only, --ops and --m-max."""
    units = plan_units(precisions, smoke=a.grid == "smoke", model=a.model)
    if a.only:
        fams = set(a.only.split(","))
        units = [u for u in units if u[1].family in fams]
    if a.ops:
        names = set(a.ops.split(","))
        units = [u for u in units if u[1].name in names]
    if a.skip_ops:
        skip = set(a.skip_ops.split(","))
        units = [u for u in units if u[1].name not in skip and not any(sk.endswith("*") and u[1].name.startswith(sk[:-1]) for sk in skip)]
    if a.m_max:
        units = [u for u in units if u[2].get("m", 0) <= a.m_max]
    for lim in a.limit:
        fam, cond = lim.split(":")
        if ">=" in cond:  # FAMILY:AXIS>=MIN
            axis, low = cond.split(">=")
            units = [u for u in units if u[1].family != fam or u[2].get(axis, 0) >= int(low)]
            continue
        axis, top = cond.split("=")
        units = [u for u in units if u[1].family != fam or u[2].get(axis, 0) <= int(top)]
    if a.m_list:
        keep = {int(v) for v in a.m_list.split(",")}
        units = [u for u in units if "m" not in u[2] or u[2]["m"] in keep]
    return units


def _row_key(r: dict):
    return unit_key(r["precision"], r["op"], {k: int(r[k]) for k in ("m", "seqs", "q", "ctx") if r.get(k) not in (None, "")})


def _meta(a, argv, dev, gpu: str, precisions: list[str], planned: list) -> dict:
    """The run's provenance and the device facts measured before any op (copy rate, matmul rate,
    per-step overhead)."""
    meta = {
        "gpu_name": gpu, "device": str(dev), "precisions": precisions, "grid": a.grid, "versions": versions(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": " ".join(["python -m measure.ops.campaign", *(argv or sys.argv[1:])]),
        "model": a.model, "sliding_window": get_model(a.model).sliding_window, "status": "incomplete", "planned_units": len(planned),
        "notes": [
            "ops timed with random data and uniform random top-8 routing (the roofline's assumption)",
            "attention runs on a bf16 KV cache in both precisions (SDPA has no fp8 attention); fp8 rows are the GEMMs and experts",
            "each op timed alone, back to back under a CUDA graph with rotating weight copies (>= 256 MB) so weights stream from HBM",
            "overhead: device round trip per step (H2D inputs, graph launch, D2H tokens, sync); an engine's CPU scheduling is not in it",
        ],
    }
    meta.update(device_facts(dev))
    return meta


def device_facts(dev) -> dict:
    """The ceilings and the per-step device term, measured before any op: copy bandwidth, bf16/fp8
    matmul rates (an fp8 failure recorded as such), SM count, the device round trip per step."""
    import torch  # heavy, optional: only the GPU campaign needs it

    from measure.ops.timing import copy_bandwidth_tbps, matmul_tflops, step_overhead  # imports torch

    facts: dict = {"copy_bandwidth_tbps": None}
    if dev.type == "cuda":
        facts["sm_count"] = torch.cuda.get_device_properties(dev).multi_processor_count
        facts["copy_bandwidth_tbps"] = copy_bandwidth_tbps(dev)
        facts["matmul_tflops"] = {"bf16": matmul_tflops(dev, False)}
        try:
            facts["matmul_tflops"]["fp8"] = matmul_tflops(dev, True)
        except Exception as e:
            facts["matmul_tflops"]["fp8"] = f"{type(e).__name__}: {e}"
    facts["overhead"] = step_overhead(dev)
    return facts


def _time_units(units, done: set, a, dev, disabled, gpu: str, csv_path: Path, t_start: float, write_meta) -> tuple[int, str | None]:
    """Time every unit not done yet, a row each as it finishes; returns (units timed, why it stopped)."""
    import torch  # heavy, optional: only the GPU campaign needs it

    w = RowWriter(csv_path)
    n_done, stopped = 0, None
    try:
        for pr, o, at in units:
            if unit_key(pr, o.name, at) in done:
                continue
            if time.time() - t_start > a.budget_s:
                stopped = f"budget of {a.budget_s:.0f} s reached"
                break
            if a.max_units is not None and n_done >= a.max_units:
                stopped = f"--max-units {a.max_units} reached"
                break
            try:
                row = time_unit(o, at, pr, dev, disabled)
            except Exception as e:
                row = {"precision": pr, "op": o.name, "family": o.family, **{k: at.get(k, "") for k in ("m", "seqs", "q", "ctx")},
                       "method": "failed", "fallback": f"{type(e).__name__}: {str(e)[:200]}"}
                traceback.print_exc()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            row["gpu"] = gpu
            w.add(row)
            n_done += 1
            if n_done % 50 == 0:
                print(f"[ops] {n_done} units, {time.time() - t_start:.0f} s", flush=True)
                write_meta("incomplete")
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        w.close()
    return n_done, stopped


def main(argv=None) -> int:
    a = _args(argv)
    import torch  # heavy, optional: only the GPU campaign needs it

    t_start = time.time()
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    precisions = [p.strip() for p in a.precisions.split(",") if p.strip()]
    units = _select_units(a, precisions)
    planned = [unit_key(pr, o.name, at) for pr, o, at in units]
    csv_path = out / "ops.csv"
    if csv_path.exists() and not a.resume:
        csv_path.unlink()
    done = {_row_key(r) for r in read_rows(csv_path)} if a.resume else set()
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})"
    meta = _meta(a, argv, dev, gpu, precisions, planned)
    meta["selfcheck"], disabled = selfcheck(dev, a.checks)
    from measure.ops import kernels

    comp = a.components or str(out)  # moe_dense: the parts' kernels this run chose (its families run last)
    meta["components_table"] = comp if kernels.set_components(comp) else None
    meta["disabled_kernels"] = disabled

    def write_meta(status):
        got = {_row_key(r) for r in read_rows(csv_path) if r.get("ms")}
        missing = [u for u in planned if u not in got]
        meta.update(status=status if not missing else "incomplete", done_units=len(got), missing_units=missing[:2000],
                    missing_count=len(missing), wall_s=round(time.time() - t_start, 1))
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        return missing

    write_meta("incomplete")
    print(f"[ops] {gpu}: copy {meta.get('copy_bandwidth_tbps')} TB/s; {len(units)} units planned; selfcheck {meta['selfcheck']}", flush=True)
    n_done, stopped = _time_units(units, done, a, dev, disabled, gpu, csv_path, t_start, write_meta)
    if stopped:
        meta["stopped"] = stopped
    missing = write_meta("complete")
    print(f"[ops] done {n_done} units in {time.time() - t_start:.0f} s; missing {len(missing)}" + (f" ({stopped})" if stopped else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
