"""Table pass models (profile model_type "table", measure/ops/passtable.py): loading, validation,
interpolation, mixed passes, the fallback off the table's GPU, and the held-out error on the
committed op tables."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from costmodel.roofline import Segment
from costmodel.schemas.profile import PassTable, Profile

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "data" / "runs" / "ops"


def _table(hw="h200", prec="bf16", scale=1.0) -> PassTable:
    seqs, toks, ctx = [1.0, 4.0, 16.0], [1.0], [0.0, 1024.0]
    ms = [[[scale * 100.0 * s * (1 + c / 4096) for c in ctx] for _ in toks] for s in seqs]
    return PassTable(hardware=hw, precision=prec, seqs=seqs, tokens_per_seq=toks, context_tokens=ctx, ms=ms,
                     token_m=[1.0, 16.0], token_ms=[scale * 50.0, scale * 400.0], overhead_ms=0.0)


def _profile(**kw) -> Profile:
    p = roofline_profile("h200", "bf16", 0.5)
    pm = p.modes["ar"].pass_models["decode_step"]
    pm.model_type, pm.table = "table", _table(**kw)
    return p


def test_old_profiles_load_as_linear_and_price_unchanged():
    for path in (ROOT / "costmodel/data/profiles/eager").glob("*.json"):
        d = json.loads(path.read_text())
        p = Profile.from_dict(d)
        assert all(pm.model_type == "linear" and pm.table is None for m in p.modes.values() for pm in m.pass_models.values())
        seg = (Segment("decode_step", 8, 1, 1024),)
        assert p.pass_ms("ar", seg) > 0
        break
    p = roofline_profile("h200", "bf16", 0.5)
    seg = (Segment("decode_step", 4, 1, 1024),)
    assert p.pass_ms("ar", seg) == pytest.approx(p.roofline("ar").pass_cost(seg).roofline_ms / 0.5)


def test_table_interpolates_in_log_space_and_round_trips(tmp_path):
    p = _profile()
    roof = p.roofline("ar")
    for s, c in ((1, 0), (4, 1024), (16, 0)):
        seg = (Segment("decode_step", s, 1, c),)
        assert p.pass_ms("ar", seg) == pytest.approx(max(roof.pass_cost(seg).roofline_ms, 100.0 * s * (1 + c / 4096)))
    # 2 sequences: halfway between 1 and 4 in log space -> the geometric mean of 100 and 400
    assert p.pass_ms("ar", (Segment("decode_step", 2, 1, 0),)) == pytest.approx(200.0)
    # 32 sequences: power-law extrapolation from the last two points
    assert p.pass_ms("ar", (Segment("decode_step", 32, 1, 0),)) == pytest.approx(3200.0)
    path = p.save(tmp_path / "t.json")
    q = Profile.load(path)
    assert q.modes["ar"].pass_models["decode_step"].table == p.modes["ar"].pass_models["decode_step"].table
    assert q.pass_ms("ar", (Segment("decode_step", 2, 1, 512),)) == pytest.approx(p.pass_ms("ar", (Segment("decode_step", 2, 1, 512),)))


def test_mixed_pass_shares_the_token_part():
    p = _profile()
    pm = p.modes["ar"].pass_models["prefill"]
    pm.model_type, pm.table = "table", _table()
    a, b = Segment("decode_step", 4, 1, 0), Segment("prefill", 1, 1, 0)
    t = pm.table
    own = lambda s: max(0.0, t.pass_ms(s.seqs, s.tokens, s.context) - t.tokens_ms(s.seqs * s.tokens))  # noqa: E731
    want = t.tokens_ms(5) + own(a) + own(b)
    assert p.pass_ms("ar", (a, b)) == pytest.approx(max(want, p.roofline("ar").pass_cost((a, b)).roofline_ms))
    assert p.pass_ms("ar", (a, b)) < p.pass_ms("ar", (a,)) + p.pass_ms("ar", (b,))


def test_table_for_another_gpu_falls_back_to_the_linear_coefficients():
    p = _profile(hw="h100-sxm")
    seg = (Segment("decode_step", 4, 1, 1024),)
    assert p.pass_ms("ar", seg) == pytest.approx(p.roofline("ar").pass_cost(seg).roofline_ms / 0.5)


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.update(ms=[[[1.0, 2.0]]]), "must be 3 x 1 x 2"),
    (lambda t: t.update(seqs=[1.0, 1.0, 16.0]), "strictly increasing"),
    (lambda t: t["ms"][0][0].__setitem__(0, -1.0), "finite times > 0"),
    (lambda t: t.update(token_ms=[1.0]), "token_ms"),
    (lambda t: t.update(context_tokens=[-5.0, 1024.0]), "context_tokens"),
])
def test_malformed_tables_are_one_line_user_errors(edit, words):
    d = _profile().to_dict()
    edit(d["modes"]["ar"]["pass_models"]["decode_step"]["table"])
    with pytest.raises(UserError) as e:
        Profile.from_dict(d, "profile x.json")
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("edit, words", [
    (lambda pm: pm.update(model_type="spline"), "model_type 'spline'"),
    (lambda pm: pm.update(table=None), "no table"),
    (lambda pm: pm.update(coef={}), "linear coefficients too"),
    (lambda pm: pm.update(model_type="linear"), "carries a table"),
    (lambda pm: pm.update(table={"seqs": [1]}), "not a valid costmodel profile"),
])
def test_malformed_table_models_are_user_errors(edit, words):
    d = copy.deepcopy(_profile().to_dict())
    edit(d["modes"]["ar"]["pass_models"]["decode_step"])
    with pytest.raises(UserError) as e:
        Profile.from_dict(d, "profile x.json")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_shipped_ops_profiles_price_from_tables():
    for rel in ("ops/h200-bf16.json", "ops/h100-sxm-bf16.json", "ops/h200-fp8.json", "ops/h100-sxm-fp8.json"):
        p = Profile.load(ROOT / "costmodel/data/profiles" / rel)
        for m in p.modes.values():
            for kind, pm in m.pass_models.items():
                assert pm.table_for(p.hardware.id, p.precision) is not None, (rel, kind)
                assert pm.diagnostics.heldout_mape_pct <= 5.0, (rel, kind, pm.diagnostics.heldout_mape_pct)


@pytest.mark.skipif(not (OPS / "h200" / "ops.csv").exists(), reason="committed op tables absent")
def test_table_matches_direct_composition_off_the_grid():
    from measure.ops.compose import Seg, compose
    from measure.ops.passtable import build_table, heldout
    from measure.ops.table import OpTable

    t = OpTable.load(OPS / "h200")
    pt = build_table(t, "decode_step", "bf16", "h200")
    h = heldout(t, pt, "decode_step", "bf16")
    assert h.n > 100 and h.mape_pct < 5.0
    direct = compose(t, "decode_step", [Seg(1, 1, 1024)], "bf16").ms
    assert pt.pass_ms(1, 1, 1024) == pytest.approx(direct, rel=1e-4)
    assert math.isfinite(pt.tokens_ms(300))
