"""`costmodel measure --engine ops` and `costmodel fit` of its run (measure/ops/run.py,
measure/fit/ops_runs.py): a dry run on the CPU with the tiny shapes (every Triton kernel falls back,
recorded), resumable, budgets, the shipped kernel set, and a shipped profile rebuilt from its
committed op table."""

import json
from pathlib import Path

import numpy as np
import pytest

from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from measure.fit.assemble import FitOptions
from measure.fit.ops_runs import build_ops_profile, compare_tables
from measure.ops import kernels, kernelset
from measure.ops.campaign import _params, plan_units
from measure.ops.grids import plan_grid
from measure.ops.run import OpsOptions, run_ops
from measure.ops.spikes import spikes
from measure.ops.table import read_rows

ROOT = Path(__file__).parent.parent
TINY = dict(device="cpu", hardware="h100-sxm", model="tiny-gemma4", grid="smoke")


def run(tmp_path, **kw):
    out = tmp_path / "run"
    run_ops(OpsOptions(out=str(out), **{**TINY, **kw}))
    return out, read_rows(out / "ops.csv"), json.loads((out / "meta.json").read_text())


def test_a_dry_run_writes_a_run_directory_with_kernel_and_source_per_op(tmp_path):
    out, rows, meta = run(tmp_path, precision="fp8", families=["rmsnorm", "moe", "gemm"])
    assert meta["kind"] == "ops-run" and meta["hardware"] == "h100-sxm" and meta["architecture"]["name"] == "hopper"
    assert meta["status"] == "complete" and meta["missing_count"] == 0 and meta["overhead"]["per_batch_ms"]
    moe = [r for r in rows if r["op"] == "moe"]
    # the Hopper kernel set's MoE kernels cannot run here: the next candidate is taken, and the row says so and why
    assert moe and all(r["kernel"].startswith("expert_loop") for r in moe)
    shipped = [r for r in moe if r["source"].startswith("fallback: the kernel set's kernels failed")]
    assert shipped and "triton" in shipped[0]["fallback"] and "Triton is not available" in shipped[0]["candidates"]
    assert all(float(r["unit_s"]) >= 0 for r in rows) and {r["precision"] for r in rows} == {"fp8", "*"}


def test_an_interrupted_run_keeps_its_ops_and_resumes(tmp_path):
    out, rows, meta = run(tmp_path, precision="bf16", families=["rmsnorm", "embed"], max_units=3)
    assert len(rows) == 3 and meta["status"] == "incomplete" and meta["missing_count"] == meta["planned_units"] - 3
    with pytest.raises(UserError, match="already holds an ops run"):
        run(tmp_path, precision="bf16", families=["rmsnorm", "embed"])  # nothing already written is lost
    with pytest.raises(UserError, match="--resume"):
        run(tmp_path, precision="fp8", families=["rmsnorm", "embed"], resume=True)  # not mixed with another precision
    out, rows2, meta2 = run(tmp_path, precision="bf16", families=["rmsnorm", "embed"], resume=True)
    key = lambda r: (r["op"], r["m"])  # noqa: E731  (a finished op is kept, never re-timed by the resume)
    assert [key(r) for r in rows2[:3]] == [key(r) for r in rows] and len({key(r) for r in rows2}) == len(rows2)
    assert meta2["status"] == "complete" and len(rows2) == meta2["planned_units"]


def test_budget_trades_grid_density_and_says_what_it_dropped():
    ks = kernelset.load("hopper")
    units, smoke = plan_units(["fp8"]), plan_units(["fp8"], smoke=True)
    full = plan_grid(units, ks, 1e4, smoke_units=smoke)
    assert full.level == "full" and len(full.units) == len(units) and not full.dropped
    small = plan_grid(units, ks, full.est_s * 0.7, smoke_units=smoke)
    assert small.level != "full" and small.est_s <= full.est_s * 0.7 and "the budget drops" in small.describe()
    assert small.dropped["units"] == len(units) - len(small.units) and 2 in small.dropped["m"]
    assert {(u[0], u[1].name) for u in small.units} == {(u[0], u[1].name) for u in units}  # every op keeps a grid
    with pytest.raises(UserError, match=r"too small for one unit; give at least \d+ s"):
        plan_grid(units, ks, 5, smoke_units=smoke)


def test_the_hopper_kernel_set_names_candidates_at_every_unit_and_is_built_from_the_committed_tables():
    ks = kernelset.load("hopper")
    built = kernelset.build("hopper", [ROOT / "data/runs/ops/h100", ROOT / "data/runs/ops/h200"])
    assert built.units == ks.units
    for prec in ("bf16", "fp8"):
        for pr, op, at in plan_units([prec]):
            chosen = ks.choices(pr, op.name, at)
            p = "bf16" if pr == "*" else pr
            names = {c.name for c in kernels.candidates(op.family, _params(op, at), p)}
            assert chosen and set(chosen) <= names, (pr, op.name, at, chosen)


def test_a_timing_spike_is_found_for_a_re_time():
    rows = [{"precision": "fp8", "op": "g", "m": str(m), "ms": str(ms)} for m, ms in ((256, 0.02), (512, 0.021), (1024, 0.296))]
    assert [r["m"] for r in spikes(rows)] == ["1024"]
    rows[-1]["ms"] = "0.04"
    assert spikes(rows) == []


def test_fit_rebuilds_the_shipped_h100_fp8_profile_from_its_committed_op_table(tmp_path):
    res = build_ops_profile([ROOT / "data/runs/ops/h100"], FitOptions(precision="fp8", profile_id="h100-sxm-fp8"))
    shipped = Profile.load(ROOT / "costmodel/data/profiles/ops/h100-sxm-fp8.json")
    p = res.profile
    assert p.hardware["id"] == "h100-sxm" and p.precision == "fp8" and p.engine["name"] == "ops"
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
    out, _, _ = run(tmp_path, precision="bf16", families=["rmsnorm"])
    with pytest.raises(UserError, match="complete it: costmodel measure --engine ops --resume"):
        build_ops_profile([out], FitOptions())
