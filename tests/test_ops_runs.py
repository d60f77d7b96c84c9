"""Composed pass times as run directories `costmodel fit` reads (engine "ops" with its kernels),
and the per-op projection to another GPU."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from measure.ops.compose import write_runs
from measure.ops.project import op_roofline_ms, project_rows
from measure.ops.table import ANY, OpTable
from costmodel.hardware import get_hardware
from tests.test_ops_compose import flat_table


def test_run_directories_hold_composed_passes_with_kernels(tmp_path):
    t = flat_table()
    paths = write_runs(t, "bf16", "h200", tmp_path, small=True)
    assert [p.name for p in paths] == ["ops-h200-bf16-diffusion", "ops-h200-bf16-ar", "ops-h200-bf16-mtp"]
    m = json.loads((paths[0] / "manifest.json").read_text())
    assert m["engine"]["name"] == "ops" and m["engine"]["kernels"]["moe"] == "k" and m["hardware"] == "h200"
    df = pd.read_parquet(next((paths[0] / "passes").glob("*.parquet")))
    assert set(df.pass_kind) == {"encoder_prefill", "denoise_step", "encoder_commit"}
    assert (df.gpu_ms == df.ops_ms + df.overhead_ms).all()
    mtp = pd.read_parquet(next((paths[2] / "passes").glob("*.parquet")))
    assert set(mtp.pass_kind) == {"prefill", "draft_step", "verify_step"}


def test_costmodel_fit_reads_them(tmp_path):
    exe = shutil.which("costmodel", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("costmodel CLI not installed in this environment")
    paths = write_runs(flat_table(), "bf16", "h200", tmp_path, small=True)
    out = tmp_path / "p.json"
    r = subprocess.run([exe, "fit", str(paths[1]), "--hardware", "h200", "--precision", "bf16", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    prof = json.loads(out.read_text())
    assert prof["engine"]["name"] == "ops"
    assert set(prof["modes"]) == {"ar"} and prof["modes"]["ar"]["pass_models"]["decode_step"]["coef"]


def test_projection_carries_each_ops_efficiency():
    row = dict(gpu="NVIDIA H200", precision="bf16", op="moe", family="moe", m="256", seqs="", q="", ctx="", kernel="triton", ms="0.5")
    same = project_rows([row], get_hardware("h200"), get_hardware("h200"), method="efficiency")[0]
    assert float(same["ms"]) == pytest.approx(0.5)
    h100 = project_rows([row], get_hardware("h200"), get_hardware("h100-sxm"), method="efficiency")[0]
    ratio = op_roofline_ms("moe", "bf16", {"m": 256}, get_hardware("h100-sxm")) / op_roofline_ms("moe", "bf16", {"m": 256}, get_hardware("h200"))
    assert float(h100["ms"]) == pytest.approx(0.5 * ratio) and ratio == pytest.approx(4.8 / 3.35, rel=1e-3)
    assert h100["kernel"] == "projected:triton"
    # floor method: the op's smallest time (its launch floor) is carried unscaled
    tiny = dict(row, m="1", ms="0.05")
    p = {r["m"]: float(r["ms"]) for r in project_rows([tiny, row], get_hardware("h200"), get_hardware("h100-sxm"))}
    assert p["1"] == pytest.approx(0.05) and p["256"] == pytest.approx(0.05 + 0.45 * ratio)
    t = OpTable(project_rows([tiny, row], get_hardware("h200"), get_hardware("h100-sxm")), {})
    assert t.has("moe", "bf16") and not t.has("moe", ANY)
