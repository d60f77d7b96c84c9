"""measure/ops/shapes.py: which ops a pass runs, at the real 26B-A4B shapes."""

from collections import Counter

from costmodel.models import get_model
from measure.ops.compose import Seg
from measure.ops.shapes import all_ops, layer_ops, pass_ops

TARGET = get_model("gemma4-26b-a4b")
DG = get_model("diffusiongemma-26b-a4b")
ASST = get_model("gemma4-26b-a4b-assistant")


def calls_by_op(kind, segs, model=TARGET):
    c = Counter()
    for call in pass_ops(model, kind, segs, ASST):
        c[call.op.name] += call.count
    return c


def test_projection_widths_follow_the_config():
    ops = all_ops(TARGET, ASST).ops
    # sliding: 16 query heads x 256 + K and V of 8 heads x 256; global (k_eq_v): 16 x 512 + K of 2 x 512, no V
    assert ops["gemm.qkv_sliding"].p == {"k": 2816, "n": 16 * 256 + 2 * 8 * 256}
    assert ops["gemm.qkv_full"].p == {"k": 2816, "n": 16 * 512 + 2 * 512}
    assert ops["gemm.o_full"].p == {"k": 8192, "n": 2816}
    assert ops["moe"].p == {"d": 2816, "experts": 128, "ffn": 704, "topk": 8}
    assert ops["attn.sliding.causal"].p["window"] == 1024 and ops["attn.full.causal"].p["k_eq_v"] is True
    # the assistant reads the target's KV: its "qkv" projection is Q only
    assert ops["asst.gemm.qkv_sliding"].p == {"k": 1024, "n": 8 * 256}


def test_decode_step_runs_30_layers_and_one_lm_head():
    c = calls_by_op("decode_step", [Seg(4, 1, 1024)])
    assert c["moe"] == 30 and c["router"] == 30
    assert c["attn.sliding.causal"] == 25 and c["attn.full.causal"] == 5
    assert c["rmsnorm.d2816"] == 1  # layer 0's input norm; every other norm is in the two fused norm ops per layer
    assert c["norm_fused.d2816.i1o2"] == 30 and c["norm_fused.d2816.i2o1"] == 30
    assert c["lm_head"] == 1 and c["ar_sampler"] == 1 and "dg_sampler" not in c


def test_denoise_and_commit_make_logits_sample_and_self_condition():
    den = pass_ops(DG, "denoise_step", [Seg(2, 256, 1024)], ASST)
    com = pass_ops(DG, "encoder_commit", [Seg(2, 256, 1024)], ASST)
    for calls, mask in ((den, "bidirectional"), (com, "causal")):
        names = {c.op.name for c in calls}
        assert {"lm_head", "dg_sampler", "gemm.sc_embed"} <= names
        assert f"attn.sliding.{mask}" in names
        lm = next(c for c in calls if c.op.name == "lm_head")
        assert lm.at == {"m": 512}  # logits for every canvas position of both canvases
    enc = {c.op.name for c in pass_ops(DG, "encoder_prefill", [Seg(1, 1024, 0)], ASST)}
    assert "lm_head" not in enc and "dg_sampler" not in enc


def test_prefill_makes_logits_for_the_last_token_only():
    calls = pass_ops(TARGET, "prefill", [Seg(3, 512, 0)], ASST)
    assert next(c for c in calls if c.op.name == "lm_head").at == {"m": 3}
    assert next(c for c in calls if c.op.name == "moe").at == {"m": 1536}


def test_draft_step_is_the_assistant():
    c = calls_by_op("draft_step", [Seg(8, 1, 1024)])
    assert "moe" not in c and c["asst.lm_head"] == 1
    assert c["asst.attn.sliding.causal"] == 3 and c["asst.attn.full.causal"] == 1


def test_fused_norms_replace_the_norms_they_cover():
    def norms_covered(p):  # the RMSNorms one norm_fused op stands for (a 2-input op also normalises its sum)
        return p["ins"] + (1 if p["ins"] == 2 else 0) + p["outs"]

    layer = layer_ops(TARGET, "sliding_attention", "causal")
    fused = [(o, n) for o, n in layer if o.family == "norm_fused"]
    assert not [o for o, _ in layer if o.family == "rmsnorm"]
    assert sum(norms_covered(o.p) * n for o, n in fused) == 7  # + the router's own norm = the layer's 8
    c = calls_by_op("draft_step", [Seg(8, 1, 1024)])
    assert c["norm_fused.d1024.i1o1"] == 2 * 4  # the assistant's 4 dense layers: 2 norms each, fused in pairs
