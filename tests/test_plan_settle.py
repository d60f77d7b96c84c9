"""A plan point's SLO verdict settled over replications: common random numbers across options, pass /
fail / borderline on t-intervals, cost intervals, ties where intervals overlap, the crossover's interval
by default, and the engine model's held-out error beside the verdict."""

import math

import pandas as pd

from costmodel.costing import PricingConfig, analyse, decisions
from costmodel.costing.answer import answer_frame, heldout_clause
from costmodel.costing.verdict import BORDERLINE, FAIL, PASS, judge
from costmodel.hardware import get_hardware
from costmodel.schemas.profile import heldout_error
from costmodel.shipped import resolve_profile
from costmodel.slo import parse_slo
from simulate.plan.settle import DEFAULT_MAX_REPLICATIONS, MIN_REPLICATIONS, replication_seed, settled_point, window_s
from simulate.workload import build_requests
from test_reports_fakes import point

SLO = parse_slo("p95_ttft_ms<=1000,p95_e2e_ms<=5000")


def _reps(ttfts):
    """A RepFn whose replication i reports ttft_ms_p95 = ttfts[i] (cycled); the seeds it was asked for are recorded."""
    asked = []

    def run(qps, replicas, seed, window):
        asked.append((seed, window))
        return point("ar", "h200", qps, replicas, ttft_p95=ttfts[len(asked) - 1 - len(ttfts) * ((len(asked) - 1) // len(ttfts))])

    return run, asked


def test_replications_share_seeds_across_options_and_never_between_plan_seeds():
    assert [replication_seed(0, i) for i in range(3)] == [0, 1, 2]
    assert {replication_seed(1, i) for i in range(DEFAULT_MAX_REPLICATIONS)}.isdisjoint({replication_seed(0, i) for i in range(DEFAULT_MAX_REPLICATIONS)})
    assert window_s(50.0) == 20.0 and window_s(5.0) == 60.0 and window_s(1.0) == 120.0 and window_s(5.0, 30.0) == 30.0


def test_common_random_numbers_every_gpu_and_mode_sees_the_same_requests():
    h100, h200 = resolve_profile(None, "h100-sxm"), resolve_profile(None, "h200")
    a = build_requests(h100, None, 3.0, duration_s=60.0, seed=replication_seed(2, 1))
    b = build_requests(h200, None, 3.0, duration_s=60.0, seed=replication_seed(2, 1))
    assert (a.arrival_s == b.arrival_s).all() and (a.prompt_tokens == b.prompt_tokens).all() and (a.output_tokens == b.output_tokens).all()


def test_a_point_far_below_its_bound_passes_after_the_fewest_replications():
    run, asked = _reps([300.0, 320.0])
    row = settled_point(run, 5.0, 1, SLO, seed=0)
    assert row["slo_verdict"] == PASS and row["replications"] == MIN_REPLICATIONS == len(asked)
    assert [s for s, _ in asked] == [0, 1] and row["ttft_ms_p95_ci95_high"] < 1000


def test_a_point_far_above_its_bound_fails_and_a_noisy_edge_is_borderline_at_the_cap():
    run, _ = _reps([1500.0, 1600.0])
    assert settled_point(run, 5.0, 1, SLO, seed=0)["slo_verdict"] == FAIL
    run, asked = _reps([900.0, 1100.0])
    row = settled_point(run, 5.0, 1, SLO, seed=0, max_replications=6)
    assert row["slo_verdict"] == BORDERLINE and len(asked) == 6
    assert row["ttft_ms_p95_ci95_low"] < 1000 < row["ttft_ms_p95_ci95_high"]
    assert "borderline (95% interval" in judge(row, SLO).text


def test_judge_reads_intervals_and_a_single_window_as_it_is():
    row = point("ar", "h200", 5.0, 1, ttft_p95=990.0)
    assert judge(row, SLO).status == PASS  # one window, no interval: judged on its figure
    row.update(replications=4, stable_replications=4, ttft_ms_p95_ci95_low=900.0, ttft_ms_p95_ci95_high=1080.0)
    assert judge(row, SLO).status == BORDERLINE
    row.update(ttft_ms_p95_ci95_low=1010.0)
    assert judge(row, SLO).status == FAIL


def _settled(mode, qps, replicas, verdict, ttft=300.0):
    r = point(mode, "h200", qps, replicas, ttft_p95=ttft)
    lo, hi = ({PASS: (ttft - 50, ttft + 50), FAIL: (1100.0, 1300.0), BORDERLINE: (900.0, 1100.0)})[verdict]
    r.update(replications=3, stable_replications=3, ttft_ms_p95_ci95_low=lo, ttft_ms_p95_ci95_high=hi, e2e_ms_p95_ci95_low=100.0,
             e2e_ms_p95_ci95_high=2000.0)
    return r


def test_a_borderline_count_gives_the_cost_an_interval_and_overlapping_intervals_are_a_tie():
    # diffusion: 1 replica borderline, 2 settled; AR: 1 replica settled -> intervals [1, 2] and [1, 1] GPUs overlap: a tie
    rows = [_settled("diffusion", 3.0, 1, BORDERLINE, 950.0), _settled("diffusion", 3.0, 2, PASS), _settled("ar", 3.0, 1, PASS)]
    a = analyse(pd.DataFrame(rows), SLO, PricingConfig(), {"h200": get_hardware("h200")})
    cell = a.cells.set_index("mode").loc["diffusion"]
    assert cell["replicas"] == 2 and cell["replicas_low"] == 1 and "1 replica: ttft_ms_p95" in cell["borderline"]
    d = decisions(a, {})[0]
    assert d.tie and "no winner" in d.text
    ans = answer_frame(a, {})
    assert bool(ans.iloc[0]["tie"]) and ans.iloc[0]["tied_with"]  # the tie as data, for the reports
    assert bool(a.cheapest.iloc[0]["tie"])


def test_the_crossover_carries_its_interval_by_default():
    # diffusion settles cheaper-or-tied up to 2 QPS, borderline at 3, settled costlier at 4
    rows = [_settled("diffusion", 2.0, 1, PASS), _settled("ar", 2.0, 1, PASS),
            _settled("diffusion", 3.0, 1, BORDERLINE, 950.0), _settled("diffusion", 3.0, 2, PASS), _settled("ar", 3.0, 1, PASS),
            _settled("diffusion", 4.0, 1, FAIL, 1200.0), _settled("diffusion", 4.0, 2, PASS), _settled("ar", 4.0, 1, PASS)]
    c = analyse(pd.DataFrame(rows), SLO, PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert c.status == "bracketed" and (c.qps_ci95_low, c.qps_ci95_high) == (2.0, 4.0)
    assert "95% interval 2-4 QPS" in c.text and "borderline" in c.text


def test_the_answer_states_the_engine_models_held_out_error_or_that_none_was_measured():
    held = {"basis": "engine_loso, one settings set held out", "figures": {"p95_ttft_ms": {"median_pct": -8.0, "worst_pct": -22.0, "n_loads": 6}}}
    assert heldout_clause(SLO, {"h200": {"heldout_error": held}}, ["h200"]) == \
        "engine model's held-out p95 TTFT error: h200 median -8%, worst -22% (6 loads)"
    assert heldout_clause(SLO, {"h200": {}}, ["h200"]) == "engine model's held-out p95 TTFT error: not measured for this profile"
    prof = resolve_profile(None, "h200")
    assert heldout_error(prof) is None or math.isfinite(heldout_error(prof)["figures"]["p95_ttft_ms"]["median_pct"])


def test_a_replication_cap_below_a_t_interval_is_one_line(cli, tmp_path):
    code, out, err = cli("plan", "--max-replications", "1", "-o", str(tmp_path / "p"))
    assert code == 2 and "--max-replications" in err and len(err.strip().splitlines()) == 1, err
