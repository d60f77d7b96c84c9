"""Round-3 ops pieces that need no GPU: the FFN block on two streams as a layer alternative
(shapes.layer_ops / compose.resolve / chain order / projection work), the campaign's unit filters,
and the candidate lists of the new kernels."""

import pytest

from costmodel.models import get_model
from measure.ops import campaign, chain, kernels
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
    assert "moe_dense_overlap" in all_ops(TARGET, ASST).ops  # the campaign times it


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


def test_chain_runs_the_alternative_instead_of_its_parts():
    seq = chain._pass_sequence("decode_step", Seg(1, 1, 1024), TARGET, lambda o, at: o.name, {"moe_dense_overlap"})
    ops = [n for n, _ in seq]
    assert ops.count("moe_dense_overlap") == 30 and not set(PARTS) & set(ops)
    seq = chain._pass_sequence("decode_step", Seg(1, 1, 1024), TARGET, lambda o, at: o.name)
    ops = [n for n, _ in seq]
    assert "moe_dense_overlap" not in ops and ops.count("moe") == 30


def test_projection_work_of_the_ffn_block_is_its_parts():
    fl, by = op_work("moe_dense_overlap", "bf16", {"m": 64})
    parts = [op_work(n, "bf16", {"m": 64}) for n in PARTS]
    assert fl == pytest.approx(sum(p[0] for p in parts)) and by == pytest.approx(sum(p[1] for p in parts))


def test_campaign_unit_filters():
    a = campaign._args(["-o", "/tmp/x", "--only", "moe,gemm", "--limit", "moe:m>=512", "--limit", "gemm:m=8",
                        "--skip-ops", "asst.gemm*,gemm.sc_embed"])
    units = campaign._select_units(a, ["bf16"])
    assert units and all(at["m"] >= 512 for _, o, at in units if o.family == "moe")
    assert all(at["m"] <= 8 and not o.name.startswith("asst.") and o.name != "gemm.sc_embed" for _, o, at in units if o.family == "gemm")


def test_new_candidates_are_listed_in_order_and_limited_by_size():
    r1 = [c.name for c in kernels.candidates("router", {"m": 1}, "bf16")]
    assert r1[0].startswith("triton_router_1launch[") and any(n.startswith("triton_router_1launch_pdl[") for n in r1)
    assert not any("1launch" in c.name for c in kernels.candidates("router", {"m": 64}, "bf16"))
    assert [c.name for c in kernels.candidates("moe_dense", {"m": 1}, "fp8")] == ["streams2_moe_first", "streams2_dense_first",
                                                                                  "serial_table_kernels"]
    # the PDL chain check covers every PDL kernel and every MoE pair launched with a prefetch mode
    names = campaign.pdl_candidate_names()
    assert names and all("_pdl" in n or "_pf[" in n for n in names)
    assert {"triton_moe_gemv2_w8a16_pdlpf[4/4096/8|4/1024/4]", "triton_moe_gemv2_pf[2/4096/4|4/1024/4]"} <= names
    # the lm_head takes the GEMVs with the softcap in their epilogue up to 8 rows only (the fp8
    # tensor-core GEMV, slower at every shape on the H100, left the code in issue 28)
    def lm_head(m, prec="fp8"):
        return [c.name for c in kernels.candidates("lm_head", {"m": m, "k": 2816, "n": 262144}, prec)]
    assert "triton_gemv2_w8a16_pdl_softcap[4/2048/4]" in lm_head(1) and not any("mma" in n for n in lm_head(1) + lm_head(64))
    assert not any("softcap[" in n for n in lm_head(64)) and not any("softcap[" in n for n in lm_head(128, "bf16"))
    # the FFN block needs its parts' kernels from an op table
    kernels.set_components(None)
    with pytest.raises(RuntimeError, match="op table"):
        kernels._component_kernel("moe", "bf16", 1)
