"""vLLM's own MoE kernel in the operator campaign: lifted from the vllm package at run time
(measure/ops/vllm_source.py), timed as the kernel set "vllm" (`costmodel measure --engine ops
--kernel-set vllm --ops-families moe`), its tiles chosen by vLLM's own rules."""

import json
import subprocess

import pytest

from costmodel.errors import UserError
from measure.ops import kernels, kernelset
from measure.ops.run import OpsOptions, run_ops
from measure.ops.table import read_rows
from servers.vllm_real import REPO, VLLM_PY

TINY = dict(device="cpu", hardware="h100-sxm", model="tiny-gemma4", grid="smoke")
SITE = sorted((REPO / ".venv-vllm" / "lib").glob("python3*/site-packages"))


def test_the_vllm_kernel_set_names_vllms_moe_per_precision():
    ks = kernelset.load("vllm")
    assert ks.choices("bf16", "moe", {"m": 1}, "moe") == [kernels.VLLM_MOE]
    assert ks.choices("fp8", "moe", {"m": 4096}, "moe") == [kernels.VLLM_MOE + "_fp8"]
    names = {c.name for c in kernels.moe_candidates({"m": 8, "d": 64, "experts": 8, "ffn": 48, "topk": 2}, "fp8")}
    assert kernels.VLLM_MOE + "_fp8" in names
    assert "vllm" in kernelset.names() and "hopper" in kernelset.names()


def test_a_vllm_set_run_times_only_the_moe_and_records_why_a_kernel_could_not_run(tmp_path):
    out = tmp_path / "run"
    run_ops(OpsOptions(out=str(out), precision="fp8", kernel_set="vllm", max_units=1, **TINY))
    rows = read_rows(out / "ops.csv")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kernel_set"] == "vllm" and {r["family"] for r in rows} == {"moe"}
    assert "vllm_fused_moe_fp8" in json.loads(rows[0]["candidates"]) and rows[0]["source"].startswith("fallback")


def test_bad_kernel_set_options_are_refused(tmp_path):
    with pytest.raises(UserError, match="no kernel set 'nosuch'"):
        run_ops(OpsOptions(out=str(tmp_path / "a"), kernel_set="nosuch", **TINY))
    with pytest.raises(UserError, match="times the op families moe, none of those asked for"):
        run_ops(OpsOptions(out=str(tmp_path / "b"), kernel_set="vllm", families=["attn"], **TINY))
    with pytest.raises(UserError, match="--autotune times every candidate"):
        run_ops(OpsOptions(out=str(tmp_path / "c"), kernel_set="vllm", autotune=True, **TINY))


@pytest.mark.skipif(not VLLM_PY.exists() or not SITE, reason="no .venv-vllm (build it with `make vllm-env`)")
def test_vllms_tiles_come_from_its_tuned_file_else_its_default_rule():
    """On an H100 in fp8 vLLM ships a tuned file for this MoE (E=128, N=704); in bf16 it has none and
    uses get_default_config. Both read from the installed package, not copied here."""
    code = (
        "import json; from measure.ops import vllm_source as v\n"
        "dev = 'NVIDIA H100 80GB HBM3'\n"
        "out = {m: [v.moe_config(m, 128, 704, 2816, 8, d, dev) for d in ('fp8_w8a8', None)] for m in (1, 64, 4096)}\n"
        "print(json.dumps({'version': v.lifted_module().VLLM_VERSION, 'root': str(v.package_root()), 'out': out}))\n")
    r = subprocess.run([str(VLLM_PY), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "COSTMODEL_VLLM_SRC": str(SITE[0])})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["version"] == "0.32.0"
    (fp8_1, src_fp8), (bf16_1, src_bf16) = doc["out"]["1"]
    assert "tuned config E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json" in src_fp8
    assert "get_default_config" in src_bf16 and bf16_1["BLOCK_SIZE_M"] == 16 and bf16_1["BLOCK_SIZE_K"] == 128
    assert doc["out"]["4096"][1][0]["BLOCK_SIZE_M"] == 128  # large batches: large tiles, vLLM's default rule
