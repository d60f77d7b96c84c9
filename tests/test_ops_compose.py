"""measure/ops/table.py + compose.py: interpolation and composition sums on a hand-made op table."""

import pytest

from measure.ops.compose import Seg, compose, default_grid
from measure.ops.shapes import all_ops, pass_ops
from measure.ops.table import ANY, OpTable
from costmodel.models import get_model

TARGET, ASST, DG = get_model("gemma4-26b-a4b"), get_model("gemma4-26b-a4b-assistant"), get_model("diffusiongemma-26b-a4b")


def flat_table(ms_token=1.0, ms_attn=0.5, overhead=0.25, alt_ms=None):
    """Every token op costs `ms_token` at every m, every attention op `ms_attn`; alternative ops
    (OpDef.replaces) `alt_ms`, or not in the table when None."""
    rows = []
    for o in all_ops(TARGET, ASST).ops.values():
        if o.replaces:
            if alt_ms is not None:
                rows += [dict(precision="bf16", op=o.name, family=o.family, m=m, seqs="", q="", ctx="", kernel="k", ms=alt_ms)
                         for m in (1, 32768)]
            continue
        prec = [ANY] if o.precision_independent else ["bf16"]
        for pr in prec:
            if o.family == "attn":
                for s in (1, 512):
                    for q in (1, 8192):
                        for c in (0, 32768):
                            rows.append(dict(precision=pr, op=o.name, family="attn", seqs=s, q=q, ctx=c, m="", kernel="k", ms=ms_attn))
            else:
                for m in (1, 32768):
                    rows.append(dict(precision=pr, op=o.name, family=o.family, m=m, seqs="", q="", ctx="", kernel="k", ms=ms_token))
    return OpTable(rows, {"overhead": {"per_batch_ms": {"1": overhead, "512": overhead}}, "sliding_window": 1024})


def test_pass_is_the_sum_of_its_ops_plus_overhead():
    t = flat_table()
    c = compose(t, "decode_step", [Seg(4, 1, 1024)], "bf16")
    calls = pass_ops(TARGET, "decode_step", [Seg(4, 1, 1024)], ASST)
    expect = sum(c_.count * (0.5 if c_.op.family == "attn" else 1.0) for c_ in calls)
    assert c.ops_ms == pytest.approx(expect)
    assert c.ms == pytest.approx(expect + 0.25)
    assert sum(c.by_op.values()) == pytest.approx(c.ops_ms)


def test_mixed_segments_are_one_forward():
    t = flat_table()
    one = compose(t, "verify_step", [Seg(2, 5, 1024)], "bf16")
    mixed = compose(t, "verify_step", [Seg(2, 5, 1024), Seg(1, 5, 4096)], "bf16")
    # token ops run once over all tokens (flat table: same cost); attention once more per segment
    assert mixed.ops_ms - one.ops_ms == pytest.approx(30 * 0.5)


def test_token_ops_interpolate_linearly_and_flag_extrapolation():
    rows = [dict(precision="bf16", op="moe", family="moe", m=m, seqs="", q="", ctx="", kernel="k", ms=ms)
            for m, ms in ((1, 0.1), (256, 0.6), (1024, 0.8))]
    t = OpTable(rows, {})
    assert t.ms("moe", "bf16", {"m": 640}) == pytest.approx(0.7)
    assert t.ms("moe", "bf16", {"m": 2048}) == pytest.approx(0.8 + 0.2 / 768 * 1024)
    assert any(x.startswith("moe@m=2048") for x in t.extrapolated)


def test_logits_sized_ops_run_in_chunks_of_4096():
    rows = [dict(precision="bf16", op="lm_head", family="lm_head", m=m, seqs="", q="", ctx="", kernel="k", ms=ms)
            for m, ms in ((1, 0.5), (4096, 10.0))]
    t = OpTable(rows, {})
    assert t.ms("lm_head", "bf16", {"m": 8192 + 1}) == pytest.approx(2 * 10.0 + 0.5)


def test_attention_fills_skipped_points_along_sequences():
    rows = [dict(precision=ANY, op="attn.full.causal", family="attn", seqs=s, q=1, ctx=c, m="", kernel="k", ms=ms)
            for s, c, ms in ((1, 0, 0.01), (1, 32768, 1.0), (64, 0, 0.02))]  # (64, 32768) skipped for memory
    t = OpTable(rows, {})
    assert t.ms("attn.full.causal", "bf16", {"seqs": 64, "q": 1, "ctx": 32768}) == pytest.approx(64.0)
    # sliding ops are flat beyond the window
    rows = [dict(precision=ANY, op="attn.sliding.causal", family="attn", seqs=1, q=1, ctx=c, m="", kernel="k", ms=ms)
            for c, ms in ((0, 0.01), (1024, 0.05))]
    t = OpTable(rows, {"sliding_window": 1024})
    assert t.ms("attn.sliding.causal", "bf16", {"seqs": 1, "q": 1, "ctx": 32768}) == pytest.approx(0.05)


def test_default_grid_covers_the_issue_ranges():
    g = default_grid()
    assert {s.seqs for s in g["denoise_step"]} == {1, 2, 4, 8, 16, 32, 64}
    assert max(s.seqs for s in g["decode_step"]) == 512 and {s.context for s in g["decode_step"]} >= {128, 32768}
    assert {s.tokens - 1 for s in g["verify_step"]} == {1, 2, 3, 4, 6, 8}
    assert {s.tokens for s in g["prefill"]} == {64, 128, 256, 512, 1024, 2048, 4096, 8192}


def test_an_alternative_replaces_its_parts_only_where_faster():
    seg = [Seg(1, 1, 1024)]
    base = compose(flat_table(), "decode_step", seg, "bf16")
    assert "moe_dense_overlap" not in base.by_op
    slow = compose(flat_table(alt_ms=4.5), "decode_step", seg, "bf16")  # slower than its 4 parts (4 x 1.0)
    assert slow.ms == pytest.approx(base.ms) and "moe_dense_overlap" not in slow.by_op
    fast = compose(flat_table(alt_ms=2.5), "decode_step", seg, "bf16")
    assert fast.by_op["moe_dense_overlap"] == pytest.approx(30 * 2.5)
    assert not {"moe", "router", "gemm.mlp_down", "gemm_act.mlp_gate_up"} & set(fast.by_op)
    assert fast.ms == pytest.approx(base.ms - 30 * 1.5)
    # the MTP assistant's layers have no MoE: nothing to replace in a draft pass
    assert "moe_dense_overlap" not in compose(flat_table(alt_ms=2.5), "draft_step", seg, "bf16").by_op
