"""The GPU campaign's settings matrix and how `costmodel measure --engine vllm` spreads it over GPUs (no GPU needed)."""

import json

import numpy as np
import pytest

from costmodel.errors import UserError
from costmodel.modes import get_mode
from costmodel.schemas.engine_setup import Load
from measure.vllm import gpu_design
from measure.vllm.gpu_run import Budget, arrival_gaps_s, chosen_setups, parse_gpus, require_loads, split_setups

FIRST_DESIGN = {"ar": {"default", "default-steady"}, "mtp": {"k4-a0.8", "k4-a0.8-steady"}, "diffusion": {"steps48", "steps16", "steps48-steady"}}


@pytest.mark.parametrize("mode", ["ar", "mtp", "diffusion"])
def test_each_mode_has_three_settings_sets_beyond_the_first_design(mode):
    setups = gpu_design.design_for(get_mode(mode))
    new = [s for s in setups if s.label not in FIRST_DESIGN[mode]]
    assert len(new) >= 3
    assert len({json.dumps(s.settings, sort_keys=True) for s in setups if not s.label.endswith("-steady")}) == len(new) + len(FIRST_DESIGN[mode]) - 1
    for s in new:  # each warms up over its own prompt lengths, has fitted loads and checks, open loads at three rates
        assert s.loads[0].name == "warmup" and s.loads[0].prompt_tokens[1] >= max(ld.prompt_tokens[1] for ld in s.loads[1:4])
        assert {s.role(ld.name) for ld in s.loads} >= {"fit", "check"}
        assert len([ld for ld in s.loads if ld.kind == "poisson"]) >= 3
        assert s.anchor in {ld.name for ld in s.loads}


def test_bursty_loads_send_gamma_gaps_at_the_same_mean_rate():
    ld = Load("gamma-cv3-r5", n=200_000, rate_rps=5.0, arrival_cv=3.0)
    gaps = arrival_gaps_s(ld, np.random.default_rng(0), ld.n)
    assert ld.kind == "gamma"
    assert gaps.mean() == pytest.approx(0.2, rel=0.03) and gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.05)
    poisson = arrival_gaps_s(Load("poisson-r5", n=10, rate_rps=5.0), np.random.default_rng(0), 200_000)
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.03)


def test_setups_spread_over_gpus_largest_first():
    setups = chosen_setups(get_mode("ar"), setups="b2048-s64,b16384-s256,long8k")
    lanes = split_setups(setups, 2)
    assert len(lanes) == 2 and sorted(s.label for lane in lanes for s in lane) == sorted(s.label for s in setups)
    assert [s.label for s in split_setups(setups, 8)[0]] == ["b16384-s256"]  # more GPUs than setups: one each


def test_gpu_lists_and_setup_names_are_checked():
    assert parse_gpus("0, 1") == ["0", "1"] and parse_gpus(None) == []
    for bad in ("0,0", "a", "0;1"):
        with pytest.raises(UserError, match="--gpus"):
            parse_gpus(bad)
    with pytest.raises(UserError, match="not an engine setup of ar"):
        chosen_setups(get_mode("ar"), setups="default,b4096")


def test_the_measurement_budget_leaves_start_ups_out():
    b = Budget(measure_s=100)
    assert b.spent() is None
    b.measured_s += 100.5  # loads only: the engine's start-up never enters measured_s
    assert b.spent() == "budget"
    assert Budget(deadline=0.0).spent() == "deadline"


def test_a_run_that_recorded_no_load_is_an_error(tmp_path):
    (tmp_path / "b2048-s64").mkdir()
    (tmp_path / "b2048-s64" / "loads.json").write_text(json.dumps([{"name": "warmup", "kind": "closed"},
                                                                   {"name": "closed-c8", "kind": "closed", "skipped": "budget"}]))
    with pytest.raises(UserError, match="no load was recorded"):
        require_loads(tmp_path)
