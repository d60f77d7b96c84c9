"""A day larger than the memory budget runs hour by hour (simulate/plan/day_hours.py) instead of being
refused: every hour a job of its own that draws only its hour's requests; and a day whose busiest
hour alone is too large is refused in one line naming the day's own knobs."""

from __future__ import annotations

import pytest

from costmodel.errors import UserError
from simulate.plan.day import DayConfig, run_day

SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=8000"


def _day(**kw):  # every fleet: on a flat day the static one costs what the autoscaled one does and would be listed, not simulated
    return run_day(DayConfig(load="flat:6,hours=2", slo=SLO, hardware=["h100-sxm"], modes=["ar"], duration_s=30, jobs=1, every_fleet=True, **kw))


def test_a_day_over_the_memory_budget_runs_hour_by_hour(monkeypatch):
    whole = _day()
    notes = []
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "0.012")  # 12 MiB: a fleet's 10,800 requests (21 MiB) do not fit, an hour's 5,400 do
    hourly = run_day(DayConfig(load="flat:6,hours=2", slo=SLO, hardware=["h100-sxm"], modes=["ar"], duration_s=30, jobs=1, every_fleet=True),
                     progress=notes.append)
    assert any("hour by hour" in n for n in notes)
    assert len(hourly.hours) == len(whole.hours) == 4  # two hours, autoscaled and static
    by = {b.policy: b for b in hourly.bills}
    ref = {b.policy: b for b in whole.bills}
    assert by["static"].cost_usd_per_month == pytest.approx(ref["static"].cost_usd_per_month)  # the peak fleet all day, either way
    assert by["static"].requests_per_day == pytest.approx(ref["static"].requests_per_day, rel=0.05)  # other draws, the same rate
    assert by["static"].meets_slo_every_hour and hourly.hours.slo_attainment.min() > 0.95


def test_a_busiest_hour_over_the_budget_is_refused_with_the_days_knobs(monkeypatch):
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "0.005")  # 5 MiB: not even an hour
    with pytest.raises(UserError) as e:
        _day()
    msg = str(e.value)
    assert "busiest hour" in msg and "--compress" in msg and "--requests" not in msg and "--duration" not in msg and "\n" not in msg


def test_a_day_on_a_dask_scheduler_equals_the_local_run(monkeypatch):
    import distributed  # the sweep extra, which make test installs: missing, this fails rather than skips
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "0.012")  # hour by hour, as above
    local = _day()
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
    try:
        remote = _day(scheduler=cluster.scheduler_address)  # plan --load-curve ... --scheduler ADDRESS
    finally:
        cluster.close()
    assert [(b.policy, b.cost_usd_per_month, b.slo_attainment) for b in remote.bills] == [(b.policy, b.cost_usd_per_month, b.slo_attainment) for b in local.bills]


def test_an_hourly_day_with_a_borderline_peak_prices_its_low_end(monkeypatch):
    """Hour by hour, a borderline peak's low-end fleets are jobs of their own (keyed by their peak
    replicas), not mixed into the settled fleets' hours."""
    from simulate.plan import day as day_mod

    real = day_mod._peak_search
    monkeypatch.setattr(day_mod, "_peak_search", lambda cfg, lc, slo, wl, say, **kw: {
        k: (n + 1, lc.peak_qps / (n + 1), n) for k, (n, _, _) in real(cfg, lc, slo, wl, say, **kw).items()})
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "0.012")
    out = _day()
    assert len(out.hours) == 4  # the settled fleets' hours only
    static = next(b for b in out.bills if b.policy == "static")
    assert static.replicas_peak_low == static.replicas_peak - 1
    assert static.cost_usd_per_month_low == pytest.approx(static.cost_usd_per_month * static.replicas_peak_low / static.replicas_peak)
