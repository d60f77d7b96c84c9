"""One simulator behind the plan and the day (issue 38 item 2): a flat day is the plan at that QPS
(same fleet, latencies within noise), prefix caching included; a static fleet on a shared-prefix
workload gives run_point's per-request results exactly."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.modes import get_mode
from costmodel.shipped import resolve_profile
from simulate.cluster.fleet import simulate_fleet
from simulate.cluster.load import curve_requests, parse_curve
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import Scaling
from simulate.engine import EngineConfig
from simulate.plan.api import PlanConfig, run_plan
from simulate.plan.day import DayConfig, run_day
from simulate.sim import simulate_point
from simulate.workload import build_requests, load_workload

SHARED = "data/workloads/chat-system-prompt.json"
SLO = "p95_ttft_ms<=500,p95_e2e_ms<=8000"
QPS = 30.0


@pytest.mark.parametrize("caching", [None, False])
def test_a_static_fleet_on_a_shared_prefix_gives_run_points_results(caching):
    h100 = resolve_profile(None, "h100-sxm")
    engine = None if caching is None else {"enable_prefix_caching": caching}
    reqs = curve_requests(h100, load_workload(SHARED), parse_curve("flat:8,hours=0.05"), seed=2)
    assert reqs.content is not None  # the day's requests carry their prompt content, as a point's do
    cfg = EngineConfig.for_profile(h100, **(engine or {}))
    (summary, df), _ = simulate_point(h100, get_mode("mtp"), reqs, replicas=2, cfg=cfg, router="least-outstanding", seed=2, warmup_frac=0.1,
                                abort_backlog_s=None, drain_s=None, workload_desc="")
    pool = PoolSpec("p", h100, "mtp", engine=engine, scaling=Scaling(min_replicas=2, max_replicas=2, initial_replicas=2))
    run = simulate_fleet([pool], reqs, seed=2, drain_s=max(120.0, reqs.window_s))
    assert np.array_equal(run.rec.first_s, df["first_token_s"].to_numpy(), equal_nan=True)
    assert np.array_equal(run.rec.finish_s, df["finish_s"].to_numpy(), equal_nan=True)
    assert (summary.prefix_hit_rate_tokens > 0.5) == (caching is not False)  # the system prompt hits the cache unless it is off


@pytest.mark.parametrize("workload", [None, SHARED], ids=["chat", "shared-prefix"])
def test_a_flat_day_is_the_plan_at_that_qps(workload):
    plan = run_plan(PlanConfig(qps=[QPS], slo=SLO, hardware=["h100-sxm"], modes=["mtp"], workload=workload, duration_s=60, jobs=1))
    cell = plan.analysis.cells.iloc[0]
    day = run_day(DayConfig(load=f"flat:{QPS:g},hours=0.1", slo=SLO, hardware=["h100-sxm"], modes=["mtp"], workload=workload, duration_s=60,
                            compress=1, jobs=1, every_fleet=True))  # every fleet: on a flat day the static one costs what the autoscaled one does
    assert day.peak_replicas[("h100-sxm", "mtp")] == int(cell["replicas"])  # the same fleet
    static = day.hours[day.hours.policy == "static"].iloc[0]
    assert static["meets_slo"] and static["slo_attainment"] > 0.95  # the plan's fleet meets the SLO over the day, as in the plan
    assert static["ttft_ms_p95"] == pytest.approx(cell["ttft_ms_p95"], rel=0.25, abs=30)  # latencies within noise
    bill = next(b for b in day.bills if b.policy == "static")
    assert bill.requests_per_day == pytest.approx(QPS * 86400, rel=0.05)  # the real requests, the 6-minute span scaled to a day
    assert bill.gpu_hours_per_day == pytest.approx(bill.replicas_max * 24)  # static: every replica all day, not 1/10 of an hour


def test_prefix_caching_reaches_the_day():
    def ttft(caching):
        day = run_day(DayConfig(load="flat:20,hours=0.05", slo=SLO, hardware=["h100-sxm"], modes=["mtp"], workload=SHARED, duration_s=30,
                                compress=1, jobs=1, prefix_caching=caching, every_fleet=True))
        return day.hours[day.hours.policy == "static"].iloc[0]["ttft_ms_p95"], day.peak_replicas[("h100-sxm", "mtp")]

    (on, n_on), (off, n_off) = ttft(True), ttft(False)
    assert n_off > n_on or off > 1.2 * on  # the same day without the cache: a bigger fleet, or slower first tokens


def test_a_day_where_no_fleet_fits_at_its_peak_says_so_and_reports(tmp_path, capsys):
    """No fleet of --max-replicas meets the SLO at the peak: nothing is simulated, day.csv has no rows,
    and the answer and both reports still read the day."""
    from costmodel.cli import main

    out = tmp_path / "day"
    assert main(["plan", "--load-curve", "flat:100,hours=1", "--hardware", "h200", "--mode", "ar", "--max-replicas", "1", "-o", str(out)]) == 0
    assert "No fleet meets the SLO in every hour of the day." in capsys.readouterr().out
    assert main(["report", str(out), "-o", str(tmp_path / "day.html")]) == 0
    assert main(["report", str(out), "-o", str(tmp_path / "day.xlsx")]) == 0
