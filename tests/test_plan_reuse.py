"""Plan speed without changing its answers: a replication simulated once per worker process is reused
by every search that asks for it again, and the crossover's analysis (best_per_cell once for every
scope) gives the crossover that per-scope analysis gives."""

from costmodel.costing import crossover as cx
from costmodel.shipped import resolve_profile
from costmodel.slo import parse_slo
from simulate.plan import planner

SLO = parse_slo("p95_ttft_ms<=1000,p95_e2e_ms<=5000")


def test_a_point_asked_again_reuses_its_replications(monkeypatch):
    runs = []
    real = planner.simulator_point

    def counted(*args, **kw):
        fn = real(*args, **kw)

        def point(*a):
            runs.append(a)
            return fn(*a)

        return point

    monkeypatch.setattr(planner, "simulator_point", counted)
    profile = resolve_profile(None, "h100-sxm")
    first = planner.replicated_point(profile, 20.0, 7, None, planner.miss_bounds(SLO), None, SLO, 3)("h100-sxm", "ar", 1.0, 1)
    simulated = len(runs)
    again = planner.replicated_point(profile, 20.0, 7, None, planner.miss_bounds(SLO), None, SLO, 3)("h100-sxm", "ar", 1.0, 1)
    assert simulated >= 2 and len(runs) == simulated  # the second search simulated nothing
    assert again == first


def test_one_best_per_cell_gives_every_scope_the_same_crossover():
    import pandas as pd

    rows = []
    for hw, price in (("h100-sxm", 1.0), ("h200", 1.5)):
        for mode, per in (("diffusion", 1.0), ("ar", 3.0)):
            for q in (1.0, 2.0, 4.0, 8.0):
                reps = max(1, round(q / per)) if mode == "ar" else max(1, round(q))
                rows.append({"hardware": hw, "mode": mode, "qps": q, "replicas": reps, "gpus": reps, "meets_slo": True,
                             "cost_usd_per_month": price * reps * (1.0 if mode == "ar" else 0.5), "cost_usd_per_mtok_output": 1.0})
    pts = pd.DataFrame(rows)
    best = cx.best_records(pts)
    for hw in (None, "h100-sxm", "h200"):
        assert cx.find_crossover(pts, [1.0, 2.0, 4.0, 8.0], hardware=hw, best=best) == cx.find_crossover(pts, [1.0, 2.0, 4.0, 8.0], hardware=hw)
    assert cx.find_crossover(pts, [1.0, 2.0], best=best) == cx.find_crossover(pts, [1.0, 2.0])
