"""The operators of every pass kind at the models' real shapes (costmodel.models).

`layer_ops(model, layer_type)` lists the ops of one decoder layer with their fixed parameters and
how many times a layer runs each; `pass_ops(...)` expands a forward pass over segments into
`OpCall`s (op name, varying axes, count) that `compose.py` prices from the measured op tables.

Every op has a name that keys the op table (e.g. `gemm.qkv_sliding`), a family (the kind of kernel
that ran it) and fixed params; the committed op tables (data/runs/ops/) timed it over its axes:
token ops over `m` (tokens in the op), attention over (`seqs`, `q` queries per sequence, `ctx`
cached keys). Ops whose fp8 form is the same kernel (attention: bf16 KV cache; samplers, norms)
are timed once per GPU and marked `precision_independent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.models import ModelShape
from costmodel.roofline import get_pass_kind


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str
    params: tuple  # sorted (key, value) pairs of fixed parameters
    axes: tuple[str, ...]  # "m" or ("seqs", "q", "ctx")
    precision_independent: bool = False
    replaces: tuple[str, ...] = ()  # an alternative: one op standing for these ops of the same layer (compose.resolve picks)

    @property
    def p(self) -> dict:
        return dict(self.params)


def _op(name, family, axes=("m",), pi=False, replaces=(), **params) -> OpDef:
    return OpDef(name, family, tuple(sorted(params.items())), axes, pi, tuple(replaces))


@dataclass
class OpCall:
    op: OpDef
    at: dict  # axis values
    count: float = 1.0  # how many times the pass runs it at these axis values
    where: str = ""  # "layer:sliding", "top", ...


@dataclass
class ModelOps:
    """Every op definition a model uses, keyed by name."""

    ops: dict[str, OpDef] = field(default_factory=dict)

    def add(self, o: OpDef) -> OpDef:
        self.ops.setdefault(o.name, o)
        return self.ops[o.name]


def _attn_dims(m: ModelShape, layer_type: str):
    if layer_type == "full_attention":
        return m.global_head_dim, m.num_global_key_value_heads, bool(m.attention_k_eq_v), None
    return m.head_dim, m.num_key_value_heads, False, m.sliding_window


def layer_ops(m: ModelShape, layer_type: str, mask: str, prefix: str = "", alternatives: bool = False) -> list[tuple[OpDef, float]]:
    """(op, count per layer) for one decoder layer of `m`. `mask`: causal | bidirectional.
    `prefix` names the assistant's ops apart ("asst."). With `alternatives`, also the ops that can
    stand for several of these (`OpDef.replaces`; compose.resolve prices the layer with one where it
    is faster than the ops it replaces): the FFN block with the dense MLP on a second stream beside
    the router and experts (`moe_dense`)."""
    d = m.hidden_size
    full = layer_type == "full_attention"
    tag = "full" if full else "sliding"
    hd, nkv, k_eq_v, window = _attn_dims(m, layer_type)
    nq = m.num_attention_heads
    ops: list[tuple[OpDef, float]] = []
    # the layer's norms as two fused row passes (a fused op replaces the norms it covers): after
    # attention (post-attention norm, residual add, the pre-FFN norm of the dense MLP and, in a MoE
    # layer, of the experts) and after the FFN (post-FFN norm of each branch, in a MoE layer the norm
    # of their sum, residual add, and the next layer's input norm: the last layer's is the final norm,
    # the first layer's input norm is top_ops' "final_norm" op). The router computes its own norm.
    two = 2 if m.is_moe else 1
    ops.append((_op(f"norm_fused.d{d}.i1o{two}", "norm_fused", pi=True, d=d, ins=1, outs=two), 1))
    ops.append((_op(f"norm_fused.d{d}.i{two}o1", "norm_fused", pi=True, d=d, ins=two, outs=1), 1))
    kv_out = 0 if not m.has_kv_projections else nkv * hd * (1 if k_eq_v else 2)
    ops.append((_op(f"{prefix}gemm.qkv_{tag}", "gemm", k=d, n=nq * hd + kv_out), 1))
    ops.append((_op(f"{prefix}qk_norm_rope.{tag}", "qk_norm_rope", pi=True, nq=nq, nkv=nkv if m.has_kv_projections else 0, hd=hd), 1))
    ops.append((_op(f"{prefix}attn.{tag}.{mask}", "attn", axes=("seqs", "q", "ctx"), pi=True, nq=nq, nkv=nkv, hd=hd,
                    mask=mask, window=window or 0, k_eq_v=k_eq_v), 1))
    ops.append((_op(f"{prefix}gemm.o_{tag}", "gemm", k=nq * hd, n=d), 1))
    if m.intermediate_size:
        f = m.intermediate_size
        ops.append((_op(f"{prefix}gemm_act.mlp_gate_up", "gemm_act", k=d, f=f), 1))  # gate_up GEMM + gelu*up
        ops.append((_op(f"{prefix}gemm.mlp_down", "gemm", k=f, n=d), 1))
    if m.is_moe:
        ops.append((_op("router", "router", pi=True, d=d, experts=m.num_experts, topk=m.top_k_experts), 1))
        ops.append((_op("moe", "moe", d=d, experts=m.num_experts, ffn=m.moe_intermediate_size, topk=m.top_k_experts), 1))
        if alternatives and m.intermediate_size and not prefix:
            ops.append((_op("moe_dense_overlap", "moe_dense", d=d, experts=m.num_experts, ffn=m.moe_intermediate_size,
                            topk=m.top_k_experts, f=m.intermediate_size,
                            replaces=("gemm_act.mlp_gate_up", "gemm.mlp_down", "router", "moe")), 1))
    return ops


def top_ops(m: ModelShape, prefix: str = "") -> dict[str, OpDef]:
    d, v = m.hidden_size, m.vocab_size
    out = {
        "embed": _op(f"embed.d{d}", "embed", pi=True, d=d, vocab=v),
        "final_norm": _op("rmsnorm.d%d" % d, "rmsnorm", pi=True, d=d),  # stands for layer 0's input norm (see layer_ops)
        "lm_head": _op(f"{prefix}lm_head", "lm_head", k=d, n=v),
        "ar_sampler": _op("ar_sampler", "ar_sampler", pi=True, vocab=v),
    }
    if m.family == "diffusion_gemma":
        f = m.intermediate_size
        out["dg_sampler"] = _op("dg_sampler", "dg_sampler", pi=True, vocab=v)
        out["sc_embed"] = _op("gemm.sc_embed", "gemm", k=v, n=d)  # softmax(prev logits) @ embedding
        out["sc_gate_up"] = _op("gemm_act.mlp_gate_up", "gemm_act", k=d, f=f)
        out["sc_down"] = _op("gemm.mlp_down", "gemm", k=f, n=d)
    if m.backbone_hidden_size:  # MTP assistant: projections from / to the target's width
        b = m.backbone_hidden_size
        out["pre_proj"] = _op(f"{prefix}gemm.pre_proj", "gemm", k=2 * b, n=d)
        out["post_proj"] = _op(f"{prefix}gemm.post_proj", "gemm", k=d, n=b)
        out["final_norm"] = _op("rmsnorm.d%d" % d, "rmsnorm", pi=True, d=d)
    return out


def all_ops(target: ModelShape, assistant: ModelShape | None = None) -> ModelOps:
    """Every op the three models' passes use (what the op tables hold)."""
    mo = ModelOps()
    for mask in ("causal", "bidirectional"):
        for lt in sorted(set(target.layer_types)):
            for o, _ in layer_ops(target, lt, mask, alternatives=True):
                mo.add(o)
    dg = target.with_overrides(family="diffusion_gemma")
    for o in top_ops(dg).values():
        mo.add(o)
    if assistant is not None:
        for lt in sorted(set(assistant.layer_types)):
            for o, _ in layer_ops(assistant, lt, "causal", prefix="asst."):
                mo.add(o)
        for o in top_ops(assistant, prefix="asst.").values():
            mo.add(o)
    return mo


def pass_ops(model: ModelShape, kind: str, segments, assistant: ModelShape | None = None, alternatives: bool = False) -> list[OpCall]:
    """The op calls of ONE forward pass of `kind` over `segments` (costmodel.roofline.Segment-like:
    .seqs, .tokens, .context). Token ops run once over all tokens of the pass; attention runs per
    segment; logits and samplers over the tokens that make logits.

    Pass kinds: encoder_prefill (causal, no logits); denoise_step (bidirectional canvas over the
    prefix, logits + DiffusionGemma sampler + self-conditioning input for every position);
    encoder_commit (priced as vLLM runs it: a denoise pass with a causal mask: KV written, logits,
    sampler and self-conditioning for the canvas); prefill (causal, last-token logits + sampling);
    decode_step / verify_step (causal, logits + sampling for every token); draft_step (the MTP
    assistant: one token per sequence over the target's KV, logits + sampling). With `alternatives`
    the layers' alternative ops are listed too (each call's op.replaces names the calls it would
    stand for): compose.resolve keeps one side."""
    segs = list(segments)
    pk = get_pass_kind(kind)  # what the pass computes: whose model, its mask, logits and sampler
    drafting = pk.role == "assistant"
    m = assistant if drafting else model
    if drafting and assistant is None:
        raise ValueError(f"{kind} needs the assistant's shape")
    prefix = "asst." if drafting else ""
    mask = pk.attention
    T = sum(s.seqs * s.tokens for s in segs)
    calls: list[OpCall] = []
    top = top_ops(m, prefix)
    calls.append(OpCall(top["embed"], {"m": T}, 1, "top"))
    if "pre_proj" in top:
        calls.append(OpCall(top["pre_proj"], {"m": T}, 1, "top"))
    diffusion_logits = pk.sampler == "canvas"  # DiffusionGemma's sampler and self-conditioning over every canvas position
    if diffusion_logits:
        for key in ("sc_embed", "sc_gate_up", "sc_down"):
            calls.append(OpCall(top[key], {"m": T}, 1, "self-conditioning"))
    for lt in sorted(set(m.layer_types)):
        n_layers = sum(1 for t in m.layer_types if t == lt)
        for o, cnt in layer_ops(m, lt, mask, prefix, alternatives):
            if o.family == "attn":
                for s in segs:
                    calls.append(OpCall(o, {"seqs": s.seqs, "q": s.tokens, "ctx": s.context}, cnt * n_layers, f"layer:{lt}"))
            else:
                calls.append(OpCall(o, {"m": T}, cnt * n_layers, f"layer:{lt}"))
    calls.append(OpCall(top["final_norm"], {"m": T}, 1, "top"))
    if pk.sampler == "none":  # the encoder over the prompt: no lm_head
        return calls
    if pk.logits == "last":
        L = sum(s.seqs for s in segs)
    else:
        L = T
    calls.append(OpCall(top["lm_head"], {"m": L}, 1, "logits"))
    if diffusion_logits:
        calls.append(OpCall(top["dg_sampler"], {"m": L}, 1, "sampler"))
    else:
        calls.append(OpCall(top["ar_sampler"], {"m": L}, 1, "sampler"))
    if "post_proj" in top:
        calls.append(OpCall(top["post_proj"], {"m": T}, 1, "top"))
    return calls
