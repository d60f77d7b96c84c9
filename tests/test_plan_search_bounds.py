"""The plan's crossover search simulates less without changing what its statistics mean: a probe's
count already settled to pass at a higher load is pinned (more load never needs fewer replicas),
and a bracket inside a quarter of the crossover's 95% interval is not bisected further."""

from costmodel.costing import crossover as cx
from costmodel.costing.verdict import BORDERLINE, FAIL, PASS
from costmodel.slo import parse_slo
from simulate.plan import planner

SLO = parse_slo("p95_ttft_ms<=1000")


def _judged_point(verdicts: dict, asked: list):
    """A PointFn whose p95 TTFT interval per replica count lies below, above or across the bound."""

    def point(hardware, mode, qps, replicas):
        asked.append(replicas)
        low, high = {PASS: (400.0, 600.0), FAIL: (4000.0, 6000.0), BORDERLINE: (800.0, 1200.0)}[verdicts[replicas]]
        return {"hardware": hardware, "mode": mode, "qps": qps, "replicas": replicas, "stable": True, "ttft_ms_p95": (low + high) / 2,
                "ttft_ms_p95_ci95_low": low, "ttft_ms_p95_ci95_high": high}

    return point


def test_a_probe_pins_the_count_settled_above_and_simulates_only_below_it():
    asked = []
    point = _judged_point({1: BORDERLINE, 2: PASS}, asked)
    start = planner.ChainStart(lower=1, upper=2, prev_qps=2.0, upper_qps=2.5)
    (cell,) = planner.search_chain(point, "h100-sxm", "diffusion", [2.25], SLO, 64, start)
    assert asked == [1]  # 2 replicas passed at 2.5 QPS: at 2.25 QPS they pass too, not simulated
    assert cell.replicas == 2 and cell.replicas_low == 1
    pinned = next(r for r in cell.points if r["replicas"] == 2)
    assert pinned["replications"] == 0 and pinned["slo_verdict"] == PASS and "settled to pass at 2.5 QPS" in pinned["slo_pinned"]


def test_without_the_higher_loads_count_the_probe_simulates_it():
    asked = []
    point = _judged_point({1: BORDERLINE, 2: PASS}, asked)
    (cell,) = planner.search_chain(point, "h100-sxm", "diffusion", [2.25], SLO, 64, planner.ChainStart(lower=1, upper=2, prev_qps=2.0))
    assert sorted(asked) == [1, 2] and cell.replicas == 2


def test_brackets_inside_a_quarter_of_the_interval_are_not_bisected():
    c = cx.Crossover("all hardware", "bracketed", 2.0, 2.5, 2.3, None, "", qps_ci95_low=1.0, qps_ci95_high=2.5,
                     refine=[(2.2, 2.5), (2.0, 2.5), (1.0, 1.9)])
    # interval 1.0-2.5: a quarter is 0.375; 5% of 2.5 is 0.125
    assert c.gaps_to_refine() == [(1.0, 1.9), (2.0, 2.5)]  # widest first; 2.2-2.5 (0.3) is settled enough
    narrow = cx.Crossover("all hardware", "bracketed", 2.0, 2.5, 2.3, None, "", qps_ci95_low=2.3, qps_ci95_high=2.5, refine=[(2.2, 2.5)])
    assert narrow.gaps_to_refine() == [(2.2, 2.5)]  # a narrow interval: the 5% tolerance rules


def test_the_first_count_a_plan_submits_early_is_the_one_its_search_simulates_first():
    """PooledReplications.first_replications submits first_point's count before the chains' threads start: whatever the chain
    knows at its start (nothing, a lower bound from the QPS below, a count settled at a higher load), the search asks it first."""
    from costmodel.modes import get_mode

    verdicts = {r: (PASS if r >= 3 else FAIL) for r in range(1, 65)}
    starts = [planner.ChainStart(), planner.ChainStart(lower=2, prev_qps=5.0), planner.ChainStart(lower=1, upper=2, prev_qps=2.0),
              planner.ChainStart(lower=1, upper=4, prev_qps=2.0, upper_qps=8.0), planner.ChainStart(lower=2, upper=2, prev_qps=2.0, upper_qps=8.0)]
    for start in starts:
        asked = []
        planner.search_chain(_judged_point(verdicts, asked), "h200", "diffusion", [4.0, 20.0], SLO, 64, start)
        first = planner.first_point(planner.Chain("h200", get_mode("diffusion"), (4.0, 20.0), start), 64)
        assert first == (asked[0] if first is not None else None), start
    assert planner.first_point(planner.Chain("h200", get_mode("diffusion"), (4.0,), starts[-1]), 64) is None  # pinned: not simulated
