"""Leave one settings set out (issue 49), re-scored on the committed H200 runs on a small subset: the profile
fitted on DiffusionGemma at 16 denoising steps only, scored on the steady loops it never saw at 48 steps; the
held-out errors written into a profile as `heldout_error`, which the plan reads."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.schemas.profile import Profile
from measure.fit.steps import mtp_acceptance_from_steps
from measure.validate.engine_campaign import recorded_setups
from pipeline.engine_loso import FIGURES, LosoResult, SettingsSet, fit_without, score_held_out, settings_sets, write_into

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"
SHIPPED = Path(__file__).resolve().parents[1] / "costmodel" / "data" / "profiles" / "h200.json"


@pytest.fixture(scope="module")
def diffusion_sets():
    return settings_sets([s for s in recorded_setups(ROOT, "h200", "fp8") if s.mode == "diffusion"])["diffusion"]


@pytest.fixture(scope="module")
def held_out_rows(diffusion_sets):
    """Fitted on steps16 alone, scored on the 48-step steady loops (one engine start: three loads)."""
    by = {s.label: s for s in diffusion_sets}
    prof, msgs = fit_without([by["steps16"]])
    steady = tuple(r for r in by["steps48"].setups if r.setup.label == "steps48-steady")
    return score_held_out(prof, "diffusion", SettingsSet("diffusion", "steps48", by["steps48"].settings, steady), {}), msgs


def test_setups_of_one_engine_settings_are_one_settings_set(diffusion_sets):
    """Every start of one settings set, its steady twin included, is held out together."""
    by = {s.label: s for s in diffusion_sets}
    assert set(by) >= {"steps48", "steps16"}
    assert {r.setup.label for r in by["steps48"].setups} == {"steps48", "steps48-steady"}
    assert len(by["steps48"].setups) >= 5  # four starts of the whole design and the steady loops
    assert json.loads(by["steps16"].settings)["max_denoising_steps"] == 16


def test_a_held_out_setting_is_predicted_from_the_others(held_out_rows):
    rows, msgs = held_out_rows
    assert any("front-end latency" in m for m in msgs)
    loads = {r.load: r for r in rows}
    assert set(loads) == {"closed-c4-steady", "closed-c8-steady", "closed-c16-steady"}
    c8 = loads["closed-c8-steady"]
    assert c8.status == "steady" and not c8.saturated
    assert abs(c8.error_pct("tok_s")) < 15 and abs(c8.error_pct("ttft_p95_ms")) < 25  # 48 steps a canvas, from a fit at 16
    assert loads["closed-c16-steady"].saturated  # 16 clients at max_num_seqs 16: only its throughput is scored
    assert not loads["closed-c16-steady"].scored("ttft_p95_ms") and loads["closed-c16-steady"].scored("tok_s")
    assert all(math.isfinite(r.measured["e2e_p95_ms"]) and math.isfinite(r.predicted["e2e_p95_ms"]) for r in rows)


def test_the_held_out_error_is_written_into_the_profile(held_out_rows, tmp_path):
    rows, _ = held_out_rows
    result = LosoResult(rows, {"diffusion": ["steps48"]}, {}, [])
    path = tmp_path / "h200.json"
    shutil.copy(SHIPPED, path)
    print(write_into(path, result, "test: steps48's steady loops held out of a fit on steps16"))
    err = Profile.load(path).to_dict()["heldout_error"]  # kept through save and load
    assert err["basis"].startswith("test:")
    assert set(err["figures"]) <= {name for name, _ in FIGURES.values()} and "p95_ttft_ms" in err["figures"]
    warm = [r for r in rows if r.status == "steady"]  # a load cold with first-use compilations is not scored
    fig = err["figures"]["output_tok_s"]
    assert fig["n_loads"] == len(warm) >= 2 and abs(fig["worst_pct"]) >= abs(fig["median_pct"])
    # the saturated loop scores throughput only
    assert err["modes"]["diffusion"]["p95_ttft_ms"]["n_loads"] == len([r for r in warm if not r.saturated])


def test_settings_sets_of_other_k_keep_one_acceptance():
    """MTP runs at k = 2 and k = 4 in one fit: the acceptance is that of the largest k (it serves both), not a mix."""
    df = pd.DataFrame({"sd_per_pos": ["[8, 6]", "[8, 6]", "[80, 64, 51, 41]", "[30, 12]"], "sd_drafts": [10, 10, 100, 300]})

    class _Run:  # the manifest fields the provenance names
        class manifest:
            run_id, started_at, weights = "r", "2026-11-29T00:00:00Z", "random"

    acc, msg = mtp_acceptance_from_steps(df, [_Run()])
    assert acc.num_speculative_tokens == 4 and np.allclose(acc.per_position[:2], [0.8, 0.8])  # conditional: 80/100, 64/80


def test_a_miss_the_engines_own_spread_reaches_is_told_apart():
    """Per figure: the loads within target, and of the misses those no larger than the engine's own spread there."""
    from pipeline.engine_loso import HeldOutLoad

    def row(pred, spread, status="steady", saturated=False):
        return HeldOutLoad("ar", "b2048", "x/y", "l", "closed", status, saturated, {"ttft_p95_ms": 100.0}, {"ttft_p95_ms": pred},
                           {"ttft_p95_ms": spread})

    rows = [row(110, 5), row(70, 40), row(150, 10), row(300, 500, status="cold"), row(300, 500, saturated=True)]
    st = LosoResult(rows, {"ar": ["b2048"]}, {}, []).summary()["ar"]["ttft_p95_ms"]
    assert (st["n_loads"], st["within"], st["misses"], st["misses_within_spread"]) == (3, 1, 2, 1)  # cold and saturated: not scored
    assert st["worst_pct"] == 50.0 and st["median_pct"] == 10.0
