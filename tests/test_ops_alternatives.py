"""The FFN block on two streams as a layer alternative in the committed op tables, no GPU needed:
shapes.layer_ops, compose.resolve (taken only where timed and faster) and its projection work."""

import pytest

from costmodel.models import get_model
from measure.ops.compose import Seg, resolve
from measure.ops.project import op_work
from measure.ops.shapes import all_ops, layer_ops, pass_ops
from measure.ops.table import OpTable

TARGET, ASST = get_model("gemma4-26b-a4b"), get_model("gemma4-26b-a4b-assistant")
PARTS = ("gemm_act.mlp_gate_up", "gemm.mlp_down", "router", "moe")


def test_the_ffn_block_is_an_alternative_of_its_four_parts():
    plain = [o.name for o, _ in layer_ops(TARGET, "sliding_attention", "causal")]
    assert "moe_dense_overlap" not in plain
    alt = [o for o, _ in layer_ops(TARGET, "sliding_attention", "causal", alternatives=True) if o.replaces]
    assert [o.name for o in alt] == ["moe_dense_overlap"] and alt[0].replaces == PARTS and alt[0].family == "moe_dense"
    assert not any(o.replaces for o, _ in layer_ops(ASST, "sliding_attention", "causal", prefix="asst.", alternatives=True))
    assert "moe_dense_overlap" in all_ops(TARGET, ASST).ops  # the op tables hold its timings


def _table(alt_points):
    rows = [dict(precision="bf16", op=n, family="x", m=m, seqs="", q="", ctx="", kernel="k", ms=1.0) for n in PARTS for m in (1, 32768)]
    rows += [dict(precision="bf16", op="moe_dense_overlap", family="moe_dense", m=m, seqs="", q="", ctx="", kernel="k", ms=ms)
             for m, ms in alt_points]
    return OpTable(rows, {})


def test_resolve_uses_the_alternative_only_where_timed_and_faster():
    calls = [c for c in pass_ops(TARGET, "prefill", [Seg(1, 1024, 0)], ASST, alternatives=True)
             if c.op.name in PARTS + ("moe_dense_overlap",)]
    names = lambda t: sorted({c.op.name for c in resolve(calls, t, "bf16")})  # noqa: E731
    assert names(_table([(1, 3.0), (8192, 3.0)])) == ["moe_dense_overlap"]  # 3 < 4 parts x 1.0
    assert names(_table([(1, 5.0), (8192, 5.0)])) == sorted(PARTS)  # slower than the parts
    assert names(_table([(1, 3.0), (512, 3.0)])) == sorted(PARTS)  # 1024 tokens: beyond its timed range, no extrapolation
    assert names(_table([])) == sorted(PARTS)  # a table without it (older tables, projections)


def test_projection_work_of_the_ffn_block_is_its_parts():
    fl, by = op_work("moe_dense_overlap", "bf16", {"m": 64})
    parts = [op_work(n, "bf16", {"m": 64}) for n in PARTS]
    assert fl == pytest.approx(sum(p[0] for p in parts)) and by == pytest.approx(sum(p[1] for p in parts))
