"""plan --seeds N (replica-count spread, a 95% interval of the winner's cost) and plan --sensitivity
(the decision at both ends of each input's range; "decision robust" or the input that flips it)."""

import json

import openpyxl
import pandas as pd
import pytest

from simulate.plan.sensitivity import _Row, _summarise
from test_reports_fakes import toy_point


def _cheapest(*rows):
    return pd.DataFrame([{"qps": q, "none_meets": False, "hardware": h, "mode": m, "cost_usd_per_month": c} for q, h, m, c in rows])


def test_the_verdict_names_the_input_the_end_and_the_load_that_flip_it():
    base = _cheapest((5.0, "rtx-5090", "mtp", 668.0), (20.0, "rtx-5090", "mtp", 1336.0))
    same = _Row("h200 price", "3.5", "4.5", "catalog", {"low": base, "high": base})
    high = {"cheapest": _cheapest((5.0, "rtx-5090", "mtp", 832.0), (20.0, "h100-sxm", "mtp", 1818.0)),
            "costs": {(20.0, "rtx-5090 / mtp"): 1910.0, (20.0, "h100-sxm / mtp"): 1818.0}}
    flip = _Row("rtx-5090 price", "0.69", "1.14", "catalog", {"low": base, "high": high})
    s = _summarise(base, [same])
    assert s.verdict.startswith("decision robust") and s.base_usd_per_month == pytest.approx(2004.0)
    s = _summarise(base, [same, flip])
    assert s.verdict == ("decision flips with rtx-5090 price (20 QPS: rtx-5090 / mtp -> h100-sxm / mtp at the high end (1.14): "
                         "h100-sxm / mtp $1,818 vs rtx-5090 / mtp $1,910/month)")
    assert s.table.set_index("input").loc["rtx-5090 price", "high_usd_per_month"] == pytest.approx(2650.0)
    tie = {"cheapest": _cheapest((5.0, "rtx-5090", "ar", 668.0), (20.0, "rtx-5090", "mtp", 1336.0)),
           "costs": {(5.0, "rtx-5090 / mtp"): 668.0, (5.0, "rtx-5090 / ar"): 668.0}}
    s = _summarise(base, [same, _Row("prompt length", "x0.5", "x2", "(A)", {"low": tie, "high": base})])
    assert s.verdict.startswith("decision robust: the cheapest fleet's GPU holds") and s.verdict.endswith("changes with prompt length")


def test_the_verdict_says_how_far_the_crossover_moves_with_each_input():
    """Each re-planned end bisects its own crossover; price rows re-price without searching it."""
    base = _cheapest((5.0, "h100-sxm", "mtp", 2154.0))
    end = lambda q: {"cheapest": base, "costs": {}, "crossover_searched": True, "crossover_qps": q}  # noqa: E731
    priced = {"cheapest": base, "costs": {}, "crossover_searched": False, "crossover_qps": None}
    rows = [_Row("h100-sxm price", "2.49", "3.5", "catalog", {"low": priced, "high": priced}),
            _Row("pass-cost error", "x0.871", "x1.13", "fit", {"low": end(3.98), "high": end(2.78)}),
            _Row("steps per canvas", "x0.75", "x1.25", "(A)", {"low": end(None), "high": end(2.3)})]
    s = _summarise(base, rows, base_crossover=3.36)
    assert s.verdict.endswith("the crossover (~3.36 QPS) moves over 2.3-3.98 QPS across the inputs' ranges (pass-cost error 3.98 / 2.78, "
                              "steps per canvas not bracketed / 2.3 QPS at the low / high end)")
    t = s.table.set_index("input")
    assert t.loc["pass-cost error", "low_crossover_qps"] == 3.98 and pd.isna(t.loc["h100-sxm price", "low_crossover_qps"])
    assert "crossover" not in _summarise(base, rows).verdict  # the plan searched no crossover of its own


@pytest.fixture
def toy(toy_simulator):

    toy_simulator(lambda profile, duration_s, seed, workload=None, miss_bounds=(), engine=None: toy_point)


def test_seeds_and_sensitivity_on_the_command_line(cli, tmp_path, toy):
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--qps", "2,10", "--hardware", "h200,rtx-5090", "--mode", "diffusion,ar", "--jobs", "1", "--seeds", "3",
                            "--sensitivity", "-o", str(out))
    assert code == 0, err
    assert "Replica count over 3 seeds" in stdout and "95% interval" in stdout and "decision" in stdout
    rep = pd.read_csv(out / "replicates.csv")
    assert {"replicas_seed_0", "replicas_seed_1", "replicas_seed_2", "replicas_min", "replicas_max"} <= set(rep.columns)
    sens = pd.read_csv(out / "sensitivity.csv")
    assert {"h200 price (USD per GPU-hour)", "pass-cost error", "DiffusionGemma prefill", "MTP acceptance", "steps per canvas",
            "prompt length", "output length"} <= set(sens["input"])
    doc = json.loads((out / "plan.json").read_text())
    assert doc["sensitivity"]["verdict"].startswith("decision ") and len(doc["replicates"]["seeds"]) == 3
    assert cli("report", str(out), "-o", str(tmp_path / "r.html"))[0] == 0
    page = (tmp_path / "r.html").read_text()
    assert 'data-chart="tornado"' in page and "Sensitivity (plan --sensitivity" in page and "3 seeds: 95% interval $" in page
    assert cli("report", str(out), "-o", str(tmp_path / "b.xlsx"))[0] == 0
    assert openpyxl.load_workbook(tmp_path / "b.xlsx").sheetnames == ["Summary", "Fleet", "Assumptions", "Prices", "Sensitivity"]


def test_seeds_below_one_is_one_line(cli, tmp_path):
    code, _, err = cli("plan", "--seeds", "0", "-o", str(tmp_path / "p"))
    assert code == 2 and "--seeds 0 is below its bound of 1" in err and not (tmp_path / "p").exists()


def test_diffusiongemmas_prefill_is_moved_alone():
    """Its prompts share their steps with canvases, so the fit prices them loosely: the prefill pass moves, nothing else."""
    import copy

    from costmodel.shipped import shipped_dir
    from simulate.plan.sensitivity import _scale_canvas_prefill

    doc = json.loads((shipped_dir() / "h200.json").read_text())
    moved = copy.deepcopy(doc)
    _scale_canvas_prefill(moved, 2.0)
    prefill = doc["modes"]["diffusion"]["pass_models"]["encoder_prefill"]["coef"]
    assert moved["modes"]["diffusion"]["pass_models"]["encoder_prefill"]["coef"] == {k: 2 * v for k, v in prefill.items()}
    for mode, kind in (("diffusion", "denoise_step"), ("diffusion", "encoder_commit"), ("ar", "prefill"), ("mtp", "prefill")):
        assert moved["modes"][mode]["pass_models"][kind] == doc["modes"][mode]["pass_models"][kind]
