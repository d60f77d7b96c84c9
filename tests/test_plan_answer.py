"""The answer plan prints, and every output prints in the same words: ties called ties, the
crossover found by bisection along QPS (the same whatever the grid), and what the answer rests on,
derived from the profile's provenance."""

import json
from pathlib import Path

import pandas as pd
import pytest

from costmodel.hardware import get_hardware
from costmodel.schemas.provenance import rests_on
from costmodel.costing import PricingConfig, analyse, decisions, with_seeds
from costmodel.slo import parse_slo
from test_reports_fakes import point, toy_point

SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=5000"
# the fleet names the precision of the shipped h200 profile plan prices (fp8 since the measured engine defaults)
H200_PRECISION = json.loads((Path(__file__).resolve().parents[1] / "costmodel" / "data" / "profiles" / "h200.json").read_text())["precision"]


@pytest.fixture
def toy_sim(toy_simulator):
    toy_simulator(lambda profile, duration_s, seed, workload=None, miss_bounds=(), engine=None: toy_point)


def _plan(cli, out, qps: str):
    code, stdout, err = cli("plan", "--qps", qps, "--slo", SLO, "--hardware", "h200", "--jobs", "1", "-o", str(out))
    assert code == 0, err
    return stdout, pd.read_csv(out / "answer.csv"), json.loads((out / "plan.json").read_text())


def test_same_fleet_same_cost_is_a_tie_not_a_winner():
    # 1 x h200 each; AR finished more tokens in the window (lower USD per 1M output tokens): still a tie
    rows = [point("diffusion", "h200", 2.0, 1, out_tok_s=380.0), point("ar", "h200", 2.0, 1, out_tok_s=400.0),
            point("mtp", "h200", 2.0, 1, out_tok_s=390.0)]
    a = analyse(pd.DataFrame(rows), parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")})
    d = decisions(a, {})[0]
    assert d.tie and d.fleet == "1 x h200: diffusion = ar = mtp" and "no winner" in d.text  # registry order, not by tokens per dollar
    assert a.cells["cheapest_at_qps"].all()


def test_the_crossover_does_not_move_with_the_grid_and_a_tie_prints_as_a_tie(cli, tmp_path, toy_sim):
    # the toy: one h200 meets the SLO up to 2.8 QPS with diffusion, 4 with AR, 4.48 with MTP -> the crossover is 2.8 QPS
    coarse_out, coarse, doc = _plan(cli, tmp_path / "coarse", "1,20")
    fine_out, fine, _ = _plan(cli, tmp_path / "fine", "1,2,3,4,5,6,7,8,10,15,20")
    for stdout, ans in ((coarse_out, coarse), (fine_out, fine)):
        c = ans[ans["question"] == "crossover (all hardware)"].iloc[0]
        assert c["crossover_qps_low"] <= 2.8 < c["crossover_qps_high"] and c["crossover_qps_high"] - c["crossover_qps_low"] <= 0.05 * c["crossover_qps_high"]
        assert stdout.strip().splitlines()[-1].startswith("crossover: DiffusionGemma costs more above ~")  # the answer is the last line
        at1 = ans[ans["qps"] == 1.0].iloc[0]
        assert bool(at1["tie"]) and at1["answer"].startswith("At 1 QPS: a tie at $") and at1["fleet"] == f"1 x h200 ({H200_PRECISION}): diffusion = ar = mtp"
        assert at1["answer"] in stdout.replace("\n", "")
    assert "only ties with AR/MTP" in doc["results"]["crossover"]["text"]  # never strictly cheaper: the text says so
    assert doc["results"]["answer"][-1] == doc["results"]["crossover"]["text"]


def test_the_finance_csv_carries_the_same_answer_and_what_it_rests_on(cli, tmp_path, toy_sim):
    _, ans, doc = _plan(cli, tmp_path / "plan", "1,20")
    assert cli("report", str(tmp_path / "plan"), "-o", str(tmp_path / "fin.csv"))[0] == 0
    fin = pd.read_csv(tmp_path / "fin.answer.csv")
    assert fin["answer"].tolist() == ans["answer"].tolist() == doc["results"]["answer"]
    md = (tmp_path / "fin.dictionary.md").read_text()
    assert "## The answer and what it rests on" in md and "prior MTP acceptance" in md and "| rests_on |" in md


def test_rests_on_reads_the_provenance_not_the_gpu_name():
    prov = {"pass_models": {"ar": {"decode_step": {"kind": "projected", "source": "per-op projection of the X bf16 table to Y's int4 roofline, tool.py"}}},
            "engine": {}}
    assert rests_on(prov, "ar") == "projected pass timings (per-op projection of the X bf16 table to Y's int4 roofline)"
    prov["pass_models"]["ar"]["decode_step"] = {"kind": "roofline", "source": "roofline time / efficiency 0.33"}
    assert rests_on(prov, "ar") == "roofline-only pass timings (roofline time / efficiency 0.33)"


def test_seeds_give_the_crossover_an_interval():
    rows = [point(m, "h200", q, r) for m, q, r in (("diffusion", 4.0, 1), ("ar", 4.0, 2), ("diffusion", 8.0, 3), ("ar", 8.0, 2))]
    c = analyse(pd.DataFrame(rows), parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert c.status == "bracketed" and (c.qps_low, c.qps_high) == (4.0, 8.0)
    s = with_seeds(c, [5.5, 6.0, 6.5])
    assert s.qps_ci95_low <= 4.0 and s.qps_ci95_high >= 8.0 and "over 3 seeds" in s.text
