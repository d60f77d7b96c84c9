"""measure/ops/campaign.py on the CPU with the tiny shapes: every candidate kernel that cannot run
here is recorded as a fallback (never silent), and an interrupted campaign keeps its finished ops,
lists the missing ones, and resumes."""

import json

from measure.ops import campaign
from measure.ops.table import read_rows


def run(tmp_path, *args):
    out = tmp_path / "ops"
    campaign.main(["-o", str(out), "--model", "tiny-gemma4", "--grid", "smoke", "--device", "cpu", *args])
    return out, read_rows(out / "ops.csv"), json.loads((out / "meta.json").read_text())


def test_missing_kernels_fall_back_and_say_so(tmp_path):
    out, rows, meta = run(tmp_path, "--ops", "moe,rmsnorm.d64,gemm.qkv_sliding", "--precisions", "bf16,fp8", "--m-max", "256")
    moe = [r for r in rows if r["op"] == "moe" and r["precision"] == "bf16"]
    assert moe and all(r["kernel"] == "expert_loop (fallback)" for r in moe)
    # the preferred kernels that could not run are named, with why
    assert "triton_fused_moe" in moe[0]["fallback"] and "grouped_mm" in moe[0]["fallback"]
    cands = json.loads(moe[0]["candidates"])
    assert cands["grouped_mm"].startswith("RuntimeError")
    fp8 = [r for r in rows if r["op"] == "gemm.qkv_sliding" and r["precision"] == "fp8"]
    assert fp8 and all(r["kernel"] == "dequant_bf16_mm" and "scaled_mm_rowwise" in r["fallback"] for r in fp8)
    norm = [r for r in rows if r["family"] == "rmsnorm"]
    assert norm and all(r["precision"] == "*" and r["kernel"] == "torch_add_rmsnorm" for r in norm)  # timed once per GPU
    assert meta["status"] == "complete" and meta["missing_count"] == 0 and meta["gpu_name"].startswith("cpu")


def test_interrupted_campaign_keeps_finished_ops_and_resumes(tmp_path):
    out, rows, meta = run(tmp_path, "--only", "rmsnorm,norm_fused,embed", "--precisions", "bf16", "--max-units", "4")
    assert len(rows) == 4 and all(r["ms"] for r in rows)
    assert meta["status"] == "incomplete" and meta["stopped"] == "--max-units 4 reached"
    assert meta["missing_count"] == meta["planned_units"] - 4 and len(meta["missing_units"]) == meta["missing_count"]
    out, rows2, meta2 = run(tmp_path, "--only", "rmsnorm,norm_fused,embed", "--precisions", "bf16", "--resume")
    assert rows2[:4] == rows  # finished ops kept as they were
    assert meta2["status"] == "complete" and meta2["missing_count"] == 0 and len(rows2) == meta2["planned_units"]


def test_limits_and_unit_merge(tmp_path):
    """--limit narrows one family's grid; merge replaces only the re-timed units of a family."""
    from measure.ops.merge import merge

    base, rows, _ = run(tmp_path, "--only", "rmsnorm,norm_fused", "--precisions", "bf16")
    out = tmp_path / "re"
    campaign.main(["-o", str(out), "--model", "tiny-gemma4", "--grid", "smoke", "--device", "cpu", "--only", "rmsnorm,norm_fused",
                   "--precisions", "bf16", "--limit", "rmsnorm:m=1"])
    re = read_rows(out / "ops.csv")
    assert {r["m"] for r in re if r["family"] == "rmsnorm"} == {"1"} and {r["m"] for r in re if r["family"] == "norm_fused"} != {"1"}
    kept, new = merge(base, out, {"rmsnorm"}, "test")
    merged = read_rows(base / "ops.csv")
    assert new == sum(r["family"] == "rmsnorm" for r in re) and len(merged) == len(rows)  # same units, rmsnorm m=1 re-timed
    assert json.loads((base / "meta.json").read_text())["reruns"][-1]["families"] == ["rmsnorm"]


def test_a_self_check_disables_its_candidates_on_a_large_error_a_nan_or_a_crash():
    from measure.ops.campaign import _judge

    out, disabled = {}, {}
    _judge(out, disabled, "ok", ("fast",), lambda: 0.001)
    _judge(out, disabled, "nan", ("gemv[a]", "gemv[b]"), lambda: float("nan"), where=" at m=1")
    _judge(out, disabled, "crash", ("softcap",), lambda: 1 / 0)
    assert out["ok"] == 0.001 and "fast" not in disabled
    assert disabled["gemv[a]"] == disabled["gemv[b]"] == "disabled: self-check relative error nan at m=1"
    assert out["crash"].startswith("ZeroDivisionError") and disabled["softcap"] == "disabled: self-check failed: ZeroDivisionError"
