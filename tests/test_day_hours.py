"""A day larger than the memory budget runs hour by hour (simulate/plan/day_hours.py) instead of being
refused: every hour a job of its own that draws only its own requests, simulated on the hour's busiest
span until its verdict settles (or the cap) and reported as the whole hour; and a day whose busiest
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
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "0.005")  # 5 MiB: at 200 QPS not even the busiest hour's first span (8,400 requests)
    with pytest.raises(UserError) as e:
        run_day(DayConfig(load="flat:200,hours=2", slo=SLO, hardware=["h100-sxm"], modes=["ar"], duration_s=30, jobs=1, every_fleet=True))
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


def _hour(policy="static", n_peak=2, **kw):
    from simulate.plan.day import load_day, split_slo
    from simulate.plan.day_hours import hour_job

    cfg = DayConfig(load="flat:20,hours=1", slo=SLO, hardware=["h100-sxm"], modes=["ar"], jobs=1)
    return hour_job("h100-sxm", "ar", policy, n_peak, 10.0, cfg, load_day(cfg.load, 1.0, 0), split_slo(SLO), 0, 0.0, 3600.0, **kw)


def test_an_hour_of_many_more_requests_than_its_verdict_needs_settles_on_a_span():
    """A 20 QPS hour (18,000 requests at the default 4x compression): its verdict settles on its first
    30 simulated seconds (120 s of the hour), and its row is still the hour's: its requests, its
    GPU-hours (2 replicas x the compressed hour's 0.25 h)."""
    out = _hour()
    row = out["row"]
    assert out["simulated_s"] == 120.0 and row.slo_verdict == "pass"
    assert out["requests"] < 1000  # the span and its 12 s warm-up, not the hour's 18,000
    assert row.requests_arrived == 18000 and row.offered_qps == pytest.approx(20.0)
    assert row.gpu_hours == pytest.approx(2 * 0.25) and (row.start_s, row.end_s) == (0.0, 900.0)


def test_a_borderline_span_is_simulated_again_twice_as_long_up_to_its_cap(monkeypatch):
    from dataclasses import replace

    from simulate.plan import day_hours

    spans = []
    real = day_hours._simulate

    def borderline(*a, warmup_s=0.0, **kw):  # every span borderline: it grows to the cap, and stays borderline there
        row, name, n = real(*a, warmup_s=warmup_s, **kw)
        spans.append(a[-1].span_s)
        return replace(row, slo_verdict="borderline"), name, n

    monkeypatch.setattr(day_hours, "_simulate", borderline)
    out = _hour(cap_s=240.0)
    assert spans == [168.0, 288.0, 528.0, 1056.0]  # 30, 60, 120, 240 simulated s (+ 12, 12, 12, 24 s of warm-up), x4: seconds of the curve
    assert out["simulated_s"] == 960.0 and out["row"].slo_verdict == "borderline"
    spans.clear()
    assert _hour(cap_s=float("inf"))["simulated_s"] == 3600.0  # no cap below the hour: at last the whole hour, simulated as it is
    assert spans[-1] == 3600.0


def test_the_span_sits_on_the_hours_busiest_minutes():
    from simulate.cluster.load import LoadCurve
    from simulate.plan.day_hours import busiest_span

    rising = LoadCurve((0.0, 3600.0), (10.0, 20.0), "rising")
    assert busiest_span(rising, 0.0, 3600.0, 600.0) == (3000.0, 3600.0)
    peak = LoadCurve((0.0, 1800.0, 3600.0), (10.0, 30.0, 10.0), "peak mid-hour")
    assert busiest_span(peak, 0.0, 3600.0, 600.0) == (1500.0, 2100.0)


def test_hour_jobs_at_once_and_their_cap_follow_the_memory_budget(monkeypatch):
    from simulate.plan.day import load_day
    from simulate.plan.day_hours import hour_workers

    cfg = DayConfig(load="diurnal:peak=1000,trough=300,peak_hour=14", hardware=["h100-sxm"], modes=["mtp"])
    lc = load_day(cfg.load, 1.0, 0)
    assert hour_workers(cfg, lc, 2) == (2, 240.0)  # 4 GiB over two workers holds two spans of 240 + 24 s at 1,000 QPS, not 480 + 48 s
    monkeypatch.setenv("COSTMODEL_MEMORY_BUDGET_GIB", "64")
    assert hour_workers(cfg, lc, 2) == (2, float("inf"))  # two whole busiest hours fit


def test_an_autoscaled_span_starts_at_the_most_loaded_fleet_its_policy_holds():
    """20 QPS at 9.5 per replica: the policy asks for 3 but holds 2 (10 per replica, within its 10% tolerance)."""
    from simulate.plan.day_hours import fewest_held

    assert fewest_held(20.0, 9.5, 0.1) == 2 and fewest_held(20.0, 9.5, 0.0) == 3 and fewest_held(0.5, 10.0, 0.1) == 1


def test_whole_hours_when_spans_are_off():
    from simulate.plan.day import load_day, split_slo
    from simulate.plan.day_hours import hour_job

    cfg = DayConfig(load="flat:20,hours=1", slo=SLO, hardware=["h100-sxm"], modes=["ar"], jobs=1, hour_spans=False)
    out = hour_job("h100-sxm", "ar", "static", 2, 10.0, cfg, load_day(cfg.load, 1.0, 0), split_slo(SLO), 0, 0.0, 3600.0)
    assert out["simulated_s"] == 3600.0 and out["requests"] == out["row"].requests_arrived  # the hour's own draws, every one simulated


def test_a_span_grows_only_while_it_draws_at_most_the_request_cap(monkeypatch):
    from dataclasses import replace

    from simulate.plan import day_hours

    monkeypatch.setattr(day_hours, "SPAN_CAP_REQUESTS", 3000)  # 20 QPS: spans of 30 and 60 s (+12 s) draw 840 and 1,440; 120 s (+12) 2,640; 240 s 5,280
    real = day_hours._simulate
    monkeypatch.setattr(day_hours, "_simulate", lambda *a, **kw: (lambda r: (replace(r[0], slo_verdict="borderline"), *r[1:]))(real(*a, **kw)))
    out = _hour()
    assert out["simulated_s"] == 480.0 and out["row"].slo_verdict == "borderline"  # 120 simulated s, x4: the last span within the cap


def test_a_full_size_day_at_a_1000_qps_peak_is_sized_by_its_spans_not_refused():
    """56 million requests a fleet in real time (--compress 1), but each hour runs on spans of at most
    SPAN_CAP_REQUESTS: the day is accepted and runs hour by hour."""
    from simulate.plan.day import check_size, load_day

    cfg = DayConfig(load="diurnal:peak=1000,trough=300,peak_hour=14", slo=SLO, hardware=["h100-sxm"], modes=["mtp"], compress=1)
    lc = load_day(cfg.load, cfg.load_scale, cfg.seed, cfg.max_requests)
    assert lc.expected_requests > 50e6
    assert check_size(cfg, lc, fleets=2, can_stream=True) is True
