"""The GPU kernels on a CPU: `python -m measure.ops.interpret_check` runs the Triton samplers and the
campaign self-checks that fit a CPU in Triton's interpreter (the vLLM environment has Triton), so a
kernel refactor is checked where no GPU is lent."""

import importlib.util
import json
import subprocess
import sys

import pytest

from servers.vllm_real import REPO, VLLM_PY


@pytest.mark.skipif(not VLLM_PY.exists(), reason="no .venv-vllm (build it with `make vllm-env`)")
def test_triton_kernels_agree_with_torch_in_the_interpreter():
    r = subprocess.run([str(VLLM_PY), "-m", "measure.ops.interpret_check"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["failed"] == [] and got["samplers"]["split:vs_rows_mismatch"] == 0  # same random numbers, same tokens
    assert got["selfcheck"]["fp8:scaled_mm_rowwise"] < 0.08 and got["selfcheck"]["router_topk_weight_err"] < 0.05


def test_a_disagreeing_kernel_is_named(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the module sets it on import; restored after the test
    from measure.ops.interpret_check import failures

    bad = failures({"rows:greedy_mismatch": 2.0, "rows:entropy_err": 0.5, "r4:probs_err": 0.001}, {"triton_router": "disabled: self-check failed"})
    assert bad == ["rows:greedy_mismatch = 2", "rows:entropy_err = 0.5", "triton_router: disabled: self-check failed"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="Triton is installed in this interpreter")
def test_without_triton_it_is_one_line_naming_the_environment():
    r = subprocess.run([sys.executable, "-m", "measure.ops.interpret_check"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and ".venv-vllm/bin/python" in r.stderr
