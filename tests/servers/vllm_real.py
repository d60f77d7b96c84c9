"""The real vLLM engine for tests (tests/test_vllm_*.py): each mode's server started once per test
session from the vLLM environment (.venv-vllm, `make vllm-env`), recorded by the step recorder, loaded
by `costmodel measure --endpoint` from this (main) interpreter and by `vllm bench serve` from the vLLM
one, then stopped before the next mode's server starts. Skipped only when .venv-vllm is absent
(`.ci/run` builds it through `make test`)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
MODELS = REPO / "models" / "tiny"
needs_vllm = [pytest.mark.skipif(not VLLM_PY.exists(), reason="no .venv-vllm (build it with `make vllm-env`)"),
              pytest.mark.xdist_group("vllm")]
FLUSH_EVERY = 32  # the recorder flushes often here, so a killed server leaves flushed parts
# small loads: diffusion steps run Triton kernels in the interpreter on a CPU (100-400 ms each)
LOADS = {"diffusion": dict(qps="4", requests=6, max_tokens=64, bench=4),
         "ar": dict(qps="4,32", requests=12, max_tokens=48, bench=8),
         "mtp": dict(qps="4,32", requests=12, max_tokens=48, bench=8)}


@dataclass
class ModeRuns:
    mode: str
    steps: Path  # engine-steps run (the recorder's)
    endpoint: Path  # `costmodel measure --endpoint` run
    bench: Path  # `vllm bench serve --save-result` JSON
    metrics_text: str  # one /metrics scrape after the loads
    measure_stdout: str
    killed: bool  # the server was SIGKILLed after the loads (not stopped cleanly)


def build_models() -> dict[str, Path]:
    out = subprocess.run([str(VLLM_PY), "-m", "measure.vllm.tiny_models", "--out", str(MODELS)], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return {line.split(": ")[0]: Path(line.split(": ")[1]) for line in out.stdout.splitlines() if ": " in line}


def run_bench(url: str, mode: str, tokenizer: Path, out: Path, n: int) -> None:
    code = ("import sys; from costmodel.modes import get_mode; from measure.vllm.campaign import Load, bench_serve; "
            f"bench_serve({url!r}, get_mode({mode!r}), __import__('pathlib').Path({str(tokenizer)!r}), __import__('pathlib').Path({str(out)!r}), "
            f"Load('1', 1, 1, {n}, 8.0, 24, 64 if {mode!r} == 'diffusion' else 32))")
    r = subprocess.run([str(VLLM_PY), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and out.exists(), r.stdout[-1500:] + r.stderr[-2500:]


def record_mode(mode: str, tmp: Path, kill: bool = False) -> ModeRuns:
    """Start the mode's server (recorder on), load it, bench it, stop it (or SIGKILL it)."""
    from costmodel.modes import get_mode
    from measure.vllm.campaign import prompts_file, spec_for
    from measure.vllm.server import VllmServer
    from servers.helpers import costmodel

    dirs = build_models()
    load = LOADS[mode]
    spec = spec_for(get_mode(mode), dirs, canvas=32, k=2)
    runs = ModeRuns(mode, tmp / f"{mode}-steps", tmp / f"{mode}-endpoint", tmp / f"{mode}-bench.json", "", "", kill)
    prompts = prompts_file(tmp / f"{mode}-prompts.jsonl", n=8)
    os.environ["COSTMODEL_STEP_FLUSH"] = str(FLUSH_EVERY)  # the server inherits it
    try:
        srv = VllmServer(spec, record_dir=runs.steps, timeout_s=600, log_path=tmp / f"{mode}-server.log").start()
    finally:
        os.environ.pop("COSTMODEL_STEP_FLUSH", None)
    try:
        args = ["measure", "--endpoint", srv.url, "--model", spec.name, "--qps", load["qps"], "--requests", str(load["requests"]),
                "--max-tokens", str(load["max_tokens"]), "--prompts", str(prompts), "--api", "completions", "--ignore-eos",
                "--metrics-interval", "0.25", "--timeout", "300", "-o", str(runs.endpoint)]
        code, out, err = costmodel(*args + (["--canvas-length", "32"] if mode == "diffusion" else []))
        assert code == 0, err
        runs.measure_stdout = out
        run_bench(srv.url, mode, spec.model_dir, runs.bench, load["bench"])
        runs.metrics_text = httpx.get(f"{srv.url}/metrics", timeout=10).text
        assert srv.alive(), srv.cause()
    finally:
        if kill:
            srv.kill()
        else:
            srv.stop()
    return runs


def step_table(path: Path):
    from costmodel.schemas.rundir import load_run

    return load_run(path).table("steps")


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())
