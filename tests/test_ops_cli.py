"""`costmodel fit` of a committed operator table (measure/fit/ops_runs.py, measure/ops): a shipped
what-if profile rebuilt from its op table, and the RTX 5090 one projected per op from the H100's."""

from pathlib import Path

import numpy as np
import pytest

from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from measure.fit.assemble import FitOptions
from measure.fit.ops_runs import build_ops_profile, compare_tables

ROOT = Path(__file__).parent.parent


def test_fit_rebuilds_the_shipped_h100_fp8_profile_from_its_committed_op_table(tmp_path):
    res = build_ops_profile([ROOT / "data/runs/ops/h100"], FitOptions(precision="fp8", profile_id="h100-sxm-fp8"))
    shipped = Profile.load(ROOT / "costmodel/data/profiles/ops/h100-sxm-fp8.json")
    p = res.profile
    assert p.hardware.id == "h100-sxm" and p.precision == "fp8" and p.engine["name"] == "ops"
    for mode, m in shipped.modes.items():
        for kind, pm in m.pass_models.items():
            mine = p.modes[mode].pass_models[kind]
            assert mine.model_type == "table" and np.allclose(mine.table.ms, pm.table.ms, rtol=1e-9), (mode, kind)
            assert mine.table.token_ms == pm.table.token_ms and mine.table.overhead_ms == pm.table.overhead_ms
    diffs = compare_tables(p, shipped)
    assert len(diffs) > 10000 and max(abs(d.err_pct) for d in diffs) < 1e-6


def test_fit_of_an_ops_run_needs_its_precision_and_a_complete_moe(tmp_path):
    with pytest.raises(UserError, match="pass --precision"):
        build_ops_profile([ROOT / "data/runs/ops/h100"], FitOptions())
    with pytest.raises(UserError, match="has no int4 ops"):
        build_ops_profile([ROOT / "data/runs/ops/h100"], FitOptions(precision="int4"))  # int4 on its own GPU: not timed
    part = tmp_path / "part"
    part.mkdir()
    rows = (ROOT / "data/runs/ops/h100/ops.csv").read_text().splitlines()
    (part / "ops.csv").write_text("\n".join([rows[0]] + [r for r in rows[1:] if ",moe," not in r]) + "\n")
    (part / "meta.json").write_text((ROOT / "data/runs/ops/h100/meta.json").read_text())
    with pytest.raises(UserError, match="no bf16 MoE timings"):
        build_ops_profile([part], FitOptions(precision="bf16"))


def test_fit_for_another_gpu_projects_the_table_and_rebuilds_the_shipped_rtx_5090_profile():
    res = build_ops_profile([ROOT / "data/runs/ops/h100"], FitOptions(hardware="rtx-5090", precision="int4", profile_id="rtx-5090-int4"))
    shipped = Profile.load(ROOT / "costmodel/data/profiles/ops/rtx-5090-int4.json")
    p = res.profile
    assert p.hardware.id == "rtx-5090" and p.precision == "int4" and p.provenance.kind == "projected"
    for mode, m in shipped.modes.items():
        for kind, pm in m.pass_models.items():
            mine = p.modes[mode].pass_models[kind]
            assert mine.provenance.kind == "projected" and np.allclose(mine.table.ms, pm.table.ms, rtol=1e-9), (mode, kind)
