"""Engine host overhead as its own step term (costmodel/stepcost/host_overhead.py), fitted from
recorded vLLM steps (measure/fit/host_overhead.py), and `costmodel fit --calibrate`
(measure/fit/calibrate.py), on the committed vllm-cpu step records (data/runs/vllm-cpu)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from costmodel import stepcost
from costmodel.baseline_profile import roofline_profile
from costmodel.engine_settings import EngineSettings
from costmodel.errors import UserError
from costmodel.modes import get_mode
from costmodel.roofline import Segment
from costmodel.schemas.profile import Profile, kernel_origin, prices
from costmodel.schemas.rundir import load_run
from costmodel.shipped import default_profile, shipped_dir
from measure.fit.calibrate import calibrate_steps
from measure.fit.host_overhead import busy_steps, fit_host
from simulate.engine import engine_profile

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "data" / "runs" / "vllm-cpu"
CPU = ("--hardware", "cpu-2core", "--hardware-file", str(RUNS / "hardware.json"))
DECODE1 = Segment("decode_step", 1, 1, 1500)


def with_host(p: Profile, mode: str, async_scheduling: bool, **coef) -> Profile:
    p.engine = {**p.engine, "host_overhead": {mode: {"coef": coef, "async_scheduling": async_scheduling, "source": "test"}}}
    p.__dict__.pop("_resolved", None)
    return p.validate()


def step(p: Profile, mode: str, groups) -> float:
    cost = stepcost.pass_cost(p, mode)
    draws = SimpleNamespace(side_passes=0)
    return cost.step_ms(None, groups, draws)


def test_the_host_term_is_registered_and_adds_its_composition_price():
    assert "engine_host" in [t.name for t in stepcost.step_terms()]
    base = roofline_profile("h200", "bf16", 0.5)
    fwd = step(base, "ar", (DECODE1,))
    p = with_host(roofline_profile("h200", "bf16", 0.5), "ar", False, ms=2.0, ms_per_request=0.5, ms_per_token=0.25)
    assert step(p, "ar", (DECODE1,)) == pytest.approx(fwd + 2.75)
    eight = (Segment("decode_step", 8, 1, 1500),)
    assert step(p, "ar", eight) == pytest.approx(step(base, "ar", eight) + 2.0 + 8 * 0.75)


def test_async_scheduling_hides_host_work_behind_the_forward_up_to_its_length():
    fwd = step(roofline_profile("h200", "bf16", 0.5), "ar", (DECODE1,))
    short = with_host(roofline_profile("h200", "bf16", 0.5), "ar", True, ms=fwd / 2)
    assert step(short, "ar", (DECODE1,)) == pytest.approx(fwd)  # hidden entirely
    long = with_host(roofline_profile("h200", "bf16", 0.5), "ar", True, ms=fwd + 3.0)
    assert step(long, "ar", (DECODE1,)) == pytest.approx(fwd + 3.0)  # the step is the host work: max(forward, host)


def test_the_engine_settings_async_scheduling_decides_the_overlap():
    fwd = step(roofline_profile("h200", "bf16", 0.5), "ar", (DECODE1,))
    p = with_host(roofline_profile("h200", "bf16", 0.5), "ar", False, ms=fwd / 2)  # measured without async (a CPU engine)
    on = engine_profile(p, get_mode("ar"), EngineSettings.given({"async_scheduling": True}, "CLI"))
    off = engine_profile(p, get_mode("ar"), EngineSettings.given({"async_scheduling": False}, "CLI"))
    assert step(on, "ar", (DECODE1,)) == pytest.approx(fwd)
    assert step(off, "ar", (DECODE1,)) == pytest.approx(fwd * 1.5)


def test_draft_tokens_and_canvases_are_counted_from_the_mode():
    from costmodel.stepcost.host_overhead import composition

    mtp, dg = get_mode("mtp"), get_mode("diffusion")
    c = composition(mtp, Segment("prefill", 1, 100, 0), (Segment("verify_step", 3, 5, 900),), SimpleNamespace(side_passes=4))
    assert (c["ms_per_request"], c["ms_per_token"], c["ms_per_draft_token"], c["ms_per_canvas"]) == (4, 115, 12, 0)
    kinds = dg.group_kinds
    c = composition(dg, None, tuple(Segment(k, 2, 32, 500) for k in kinds), SimpleNamespace(side_passes=0))
    assert c["ms_per_canvas"] == 2 * len(kinds) and c["ms_per_draft_token"] == 0


def test_a_negative_or_unknown_overhead_coefficient_is_refused():
    with pytest.raises(UserError, match="coef.ms = -1.0 must be a finite number >= 0"):
        with_host(roofline_profile("h200", "bf16", 0.5), "ar", False, ms=-1.0)
    with pytest.raises(UserError, match="must hold only"):
        with_host(roofline_profile("h200", "bf16", 0.5), "ar", False, ms_per_byte=1.0)


def test_every_profile_says_which_engine_and_kernel_origin_it_prices():
    p = default_profile("h100-sxm")  # the measured engine: vLLM's own kernels, its steps recorded at load
    assert kernel_origin(p) == "vllm" and "vllm" in prices(p)
    ops = Profile.load(shipped_dir() / "ops" / "h100-sxm-bf16.json")  # the per-operator what-if it replaced
    assert kernel_origin(ops) == "ops-fastest" and "the fastest kernels this project times per op" in prices(ops)
    assert "engine step term calibrated to end-to-end vLLM figures for ar, diffusion, mtp" in prices(ops)
    assert "no engine host overhead term" in prices(roofline_profile("h200", "bf16", 0.5))


def test_fit_of_recorded_steps_carries_the_host_term_and_prints_held_out_mape(cli, tmp_path):
    out = tmp_path / "ar.json"
    code, text, err = cli("fit", str(RUNS / "ar-steps"), *CPU, "--time", "gap_ms", "-o", str(out))
    assert code == 0, err
    assert "ar: host overhead per step = " in text and "held-out" in text and "wall-time MAPE" in text
    assert "the profile's step price" in text and "recorded wall time" in text
    p = Profile.load(out)
    rec = p.engine["host_overhead"]["ar"]
    assert rec["coef"]["ms"] > 0 and rec["async_scheduling"] is False and kernel_origin(p) == "vllm"
    # the profile reproduces the recorded wall time in sum (model time + host term)
    total = [line for line in text.replace("\n", " ").split("- ") if "the profile's step price" in line][0]
    assert abs(float(total.split("total ")[1].split("%")[0])) < 5


def test_a_host_fit_that_would_go_negative_is_refused():
    df = busy_steps(load_run(RUNS / "ar-steps").table("steps"))
    bad = df.assign(elapsed_ms=df["gap_ms"] * 2.0)
    with pytest.raises(UserError, match="host overhead would be negative"):
        fit_host(bad, get_mode("ar"), "test run")


@pytest.fixture(scope="module")
def cpu_ar_profile(tmp_path_factory) -> Path:
    """A vllm-cpu AR profile with the run's mean overhead folded into its passes (no host term)."""
    from tests.servers.helpers import costmodel

    out = tmp_path_factory.mktemp("cal") / "ar.json"
    code, _, err = costmodel("fit", str(RUNS / "ar-steps"), *CPU, "--time", "elapsed_ms", "--no-host-overhead", "-o", str(out))
    assert code == 0, err
    return out


def test_calibrate_prices_the_profile_as_the_recorded_engine(cli, cpu_ar_profile, tmp_path):
    out = tmp_path / "cal.json"
    code, text, err = cli("fit", "--calibrate", str(RUNS / "ar-steps"), "--profile", str(cpu_ar_profile), "--hardware", "cpu-2core", "-o", str(out))
    assert code == 0, err
    assert "priced forward x" in text and "host overhead per step" in text
    p = Profile.load(out)
    assert p.profile_id.endswith("-calibrated") and kernel_origin(p) == "vllm" and p.engine["host_overhead"]["ar"]["coef"]["ms"] > 0
    eff = float(text.split("priced forward x ")[1].split()[0])
    assert 0.5 < eff < 2.0  # the same engine's run: its model time is near what its own fit prices


def test_calibrate_refuses_a_run_of_another_gpu_or_model(cli, cpu_ar_profile, tmp_path):
    code, _, err = cli("fit", "--calibrate", str(RUNS / "ar-steps"), "--profile", str(cpu_ar_profile), "--hardware", "h100-sxm",
                       "-o", str(tmp_path / "x.json"))
    assert code == 2 and "ran on h100-sxm; profile" in err and "is for cpu-2core" in err and "Traceback" not in err
    other = Profile.load(cpu_ar_profile)
    other.modes["ar"].model = "gemma4-26b-a4b"
    with pytest.raises(UserError, match="served model .* prices gemma4-26b-a4b"):
        calibrate_steps(other, [load_run(RUNS / "ar-steps")], "cpu-2core")
    assert not (tmp_path / "x.json").exists()


def test_calibrate_needs_its_profile(cli, tmp_path):
    code, _, err = cli("fit", "--calibrate", str(RUNS / "ar-steps"), "-o", str(tmp_path / "x.json"))
    assert code == 2 and "--calibrate and --profile go together" in err
