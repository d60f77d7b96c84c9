"""Plan speed without changing its answers: a replication simulated once per worker process is reused
by every search that asks for it again, and the crossover's analysis (best_per_cell once for every
scope, or on the points as records) gives the crossover that per-scope analysis gives."""

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


def test_the_crossover_search_reads_on_records_what_the_analysis_reads_on_a_frame():
    """A plan's crossover rounds ask costing.crossovers (the points as records); the final analysis frames them: the same
    crossovers, over every GPU and each GPU's, on a plan's own points (borderline counts and pinned cells among them)."""
    from costmodel.costing import analyse, crossovers
    from simulate.plan.api import PlanConfig, run_plan

    out = run_plan(PlanConfig(qps=[2.0, 8.0], hardware=["h200", "rtx-5090"], modes=["diffusion", "ar"], jobs=1, refine_crossover=2))
    rows = [p for c in out.cells for p in c.points]
    specs = {h: p.hardware_spec() for h, p in out.profiles.items()}
    qps = sorted({c.qps for c in out.cells})
    overall, by_hardware = crossovers(rows, out.slo, out.pricing, specs, qps, planner.cell_notes(out.cells))
    a = analyse(planner.points_frame(out.cells), out.slo, out.pricing, specs, qps, planner.cell_notes(out.cells))
    assert overall == a.crossover == out.analysis.crossover and by_hardware == a.crossover_by_hardware
    assert {p["slo_verdict"] for p in rows} >= {"pass", "fail"}


def test_a_points_kv_blocks_summed_in_arrays_match_the_per_request_count():
    from costmodel.memory import replica_memory
    from costmodel.modes import get_mode

    profile = resolve_profile(None, "h200")
    r = profile.resolved()
    for name in profile.mode_names():
        m = profile.mode(name)
        mem = replica_memory(r.spec, get_mode(name), r.precision, None, model=m.model, assistant=m.assistant)
        step = mem.limits.step_tokens
        tokens = [0, 1, 15, 16, 17, 511, 512, 513, 4095, 4096, 70_000, 131_072] + list(range(0, 3000, 7))
        assert mem.layout.blocks_total(tokens, step) == sum(mem.layout.blocks_per_request(t, step) for t in tokens)


def test_one_replica_memory_budget_per_setting_serves_every_point():
    from simulate.engine import EngineConfig, replica_limits
    from costmodel.modes import get_mode

    profile = resolve_profile(None, "h100-sxm")
    cfg = EngineConfig.for_profile(profile)
    a = replica_limits(profile, get_mode("ar"), cfg, [1000, 2000])
    budgets = dict(profile.resolved().memo("replica-memory"))
    b = replica_limits(profile, get_mode("ar"), cfg, [1000, 2000])
    assert a == b and profile.resolved().memo("replica-memory") == budgets  # the second point computed no budget
