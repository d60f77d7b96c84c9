"""The cluster layer (simulate/cluster): a static fleet is today's simulator, load over time,
routers and autoscalers, admission control, and every arrival accounted for."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from costmodel.modes import get_mode
from costmodel.errors import UserError
from costmodel.shipped import resolve_profile
from simulate.cluster.autoscalers import autoscaler_names, make_autoscaler, parse_autoscaler
from simulate.cluster.classes import RequestClass
from simulate.cluster.fleet import REJECT_FULL, REJECT_TIMEOUT, simulate_fleet
from simulate.cluster.load import curve_requests, parse_curve
from simulate.cluster.outcome import RequestBound, interval_rows, summarise_span
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import Scaling, provision_s
from simulate.engine import EngineConfig
from simulate.routers import make_router, router_names
from simulate.sim import simulate_point
from simulate.workload import build_requests

BOUNDS = [RequestBound("p95", "ttft", 1000.0), RequestBound("p95", "e2e", 8000.0)]


@pytest.fixture(scope="module")
def h100():
    return resolve_profile(None, "h100-sxm")


def static(profile, mode, n, **kw):
    return PoolSpec("p", profile, mode, scaling=Scaling(min_replicas=n, max_replicas=n, initial_replicas=n), **kw)


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
def test_a_static_fleet_gives_run_points_per_request_results(h100, mode):
    reqs = build_requests(h100, None, 5.0, n_requests=1500, seed=3)
    (_, df), _ = simulate_point(h100, get_mode(mode), reqs, replicas=3, cfg=EngineConfig.for_profile(h100), router="least-outstanding", seed=3,
                                warmup_frac=0.1, abort_backlog_s=None, drain_s=None, workload_desc="")
    run = simulate_fleet([static(h100, mode, 3)], reqs, seed=3, drain_s=max(120.0, reqs.window_s))
    for ours, theirs in (("start_s", "start_s"), ("first_s", "first_token_s"), ("finish_s", "finish_s"), ("replica", "replica"),
                         ("steps", "steps"), ("preemptions", "preemptions")):
        assert np.array_equal(getattr(run.rec, ours), df[theirs].to_numpy(), equal_nan=True), ours


def test_curves_presets_and_time_rescaling(h100):
    flat = parse_curve("flat:4,hours=0.5")
    assert flat.span_s == 1800 and flat.expected_requests == pytest.approx(7200)
    day = parse_curve("diurnal:peak=30,trough=10,peak_hour=14")
    assert day.expected_requests == pytest.approx(20 * 86400, rel=1e-3)
    hourly = day.hourly_qps()
    assert len(hourly) == 24 and hourly.argmax() in (13, 14) and hourly.min() == pytest.approx(10, abs=0.2)
    # flat:Q draws exactly the arrivals of a constant-rate point at Q (same seed, same requests)
    reqs = curve_requests(h100, None, flat, seed=1)
    ref = build_requests(h100, None, 4.0, n_requests=len(reqs), seed=1)
    assert np.array_equal(reqs.arrival_s, ref.arrival_s) and np.array_equal(reqs.output_tokens, ref.output_tokens)
    assert reqs.arrival_s[-1] <= 1800


@pytest.mark.parametrize("rows, needle", [
    ("time_s,qps\n0,1\n10,-2\n", "negative rate"),
    ("time_s,qps\n0,1\n10,\n", "missing"),
    ("time_s,qps\n0,1\n20,2\n10,3\n", "not sorted"),
    ("time_s,qps\n0,1\n10,2\n10,3\n", "same time_s"),
    ("t,rate\n0,1\n", "lacks column"),
])
def test_bad_curves_are_one_line_errors(tmp_path, rows, needle):
    p = tmp_path / "curve.csv"
    p.write_text(rows)
    with pytest.raises(UserError, match=needle):
        parse_curve(str(p))


def test_unknown_preset_names_the_presets():
    with pytest.raises(UserError, match="diurnal:peak"):
        parse_curve("sine:peak=3")


def test_a_static_fleet_bills_its_replicas_and_counts_every_request(h100):
    lc = parse_curve("flat:3,hours=0.25")
    reqs = curve_requests(h100, None, lc, seed=0)
    run = simulate_fleet([static(h100, "diffusion", 2)], reqs, sample_s=300)
    rows = interval_rows(run, BOUNDS, lc.span_s, 300)
    assert len(rows) == 3 and all(r.replicas_max == 2 and r.gpu_hours == pytest.approx(2 * 300 / 3600) for r in rows)
    assert sum(r.requests_arrived for r in rows) == len(reqs)
    board = h100.hardware.board_power_w
    for r in rows:
        assert 0 < r.utilisation < 1 and 0.1 * board < r.energy_kwh * 3.6e6 / (2 * 300) < board
        assert r.cost_usd == pytest.approx(r.gpu_hours * h100.hardware.price_usd_per_gpu_hour)
    s = summarise_span(rows, lc.span_s)[0]
    assert s.cost_usd_per_month == pytest.approx(2 * h100.hardware.price_usd_per_gpu_hour * 24 * 365.25 / 12)


def _rr_replicas(profile, router: str, n: int):
    reqs = build_requests(profile, None, 2.0, n_requests=200, seed=0)
    run = simulate_fleet([static(profile, "mtp", n, router=router)], reqs)
    return run.rec.replica


def test_every_router_is_registered_and_routes(h100):
    assert set(router_names()) >= {"round-robin", "least-outstanding", "least-tokens"}
    rr = _rr_replicas(h100, "round-robin", 3)
    assert rr[:6].tolist() == [0, 1, 2, 0, 1, 2]
    for name in router_names():
        assert set(_rr_replicas(h100, name, 3).tolist()) == {0, 1, 2}


def _fake(idx, outstanding=0, kv_used=0.0, kv_reserved=0, waiting=(), kv_cap=1000.0):
    return SimpleNamespace(idx=idx, outstanding=outstanding, kv_used=kv_used, kv_reserved=kv_reserved,
                           waiting=[SimpleNamespace(prefill_len=w) for w in waiting], kv_cap=kv_cap)


def test_least_outstanding_and_least_tokens_see_the_replicas_state():
    reps = [_fake(0, outstanding=3, kv_used=100), _fake(1, outstanding=1, kv_used=900), _fake(2, outstanding=2, kv_used=50, waiting=(40,))]
    assert make_router("least-outstanding", reps)(10, 10).idx == 1
    assert make_router("least-tokens", reps)(10, 10).idx == 2  # 90 tokens of KV in use or queued
    reps[2].waiting.append(SimpleNamespace(prefill_len=500))
    assert make_router("least-tokens", reps)(10, 10).idx == 0
    with pytest.raises(UserError, match="unknown router"):
        make_router("random", reps)


def test_routing_by_class_sends_long_requests_to_their_own_pool(h100):
    rtx = resolve_profile(None, "rtx-5090")
    reqs = build_requests(h100, None, 3.0, n_requests=600, seed=2)
    cut = int(np.median(reqs.output_tokens))
    pools = [PoolSpec("short", h100, "diffusion", takes=RequestClass(max_output_tokens=cut), price_usd_per_gpu_hour=3.0),
             PoolSpec("long", rtx, "mtp", scaling=Scaling(min_replicas=2, max_replicas=2, initial_replicas=2))]
    run = simulate_fleet(pools, reqs)
    short = reqs.output_tokens <= cut
    assert np.array_equal(run.pool_of == 0, short)
    short_ids = {lf for lf in run.pools[0].lives}
    assert set(run.rec.replica[short].tolist()) <= short_ids and not set(run.rec.replica[~short].tolist()) & short_ids
    assert np.isfinite(run.rec.finish_s).all()
    rows = interval_rows(run, BOUNDS, reqs.window_s, 3600)
    assert [r.pool for r in rows] == ["short", "long", "fleet"]
    assert rows[2].cost_usd == pytest.approx(rows[0].cost_usd + rows[1].cost_usd)
    assert rows[0].cost_usd == pytest.approx(3.0 * rows[0].gpu_hours)


def _step_load(profile, low: float, high: float, hold_s: float, seed=0):
    """A trace-like curve: `low` QPS, then `high`, then `low` again, each for hold_s."""
    from simulate.cluster.load import curve

    eps = 1.0
    lc = curve([0, hold_s, hold_s + eps, 2 * hold_s, 2 * hold_s + eps, 3 * hold_s], [low, low, high, high, low, low], "step")
    return lc, curve_requests(profile, None, lc, seed)


@pytest.mark.parametrize("mode, policy", [("diffusion", "target-utilisation:target=0.5"), ("mtp", "queue-depth:target=4"),
                                          ("mtp", "request-rate:target=2")])
def test_hpa_like_policies_scale_up_with_load_and_back_down(h100, mode, policy):
    lc, reqs = _step_load(h100, 1.0, 8.0, 400.0)
    scaling = Scaling(min_replicas=1, max_replicas=12, initial_replicas=1, startup_s=10, load_gb_per_s=50, scale_down_window_s=60)
    run = simulate_fleet([PoolSpec("p", h100, mode, autoscaler=parse_autoscaler(policy), scaling=scaling)], reqs, sample_s=400)
    log = run.pools[0].scale_log  # (time, replicas wanted)
    peak = max(n for _, n in log)
    assert peak >= 2 and all(400 < t for t, _ in log) and max(n for t, n in log if t <= 800) == peak
    assert len(run.pools[0].ready) < peak  # back down once the load fell
    assert np.isfinite(run.rec.finish_s).all()
    lives = [lf for lf in run.pools[0].lives.values() if lf.requested_s > 0 and lf.ready_s is not None]
    assert lives and all(lf.ready_s - lf.requested_s == pytest.approx(provision_s(h100, get_mode(mode), scaling)) for lf in lives)


def test_schedule_policy_follows_its_hours(h100):
    hours = [1] * 24
    hours[1] = 3
    lc = parse_curve("flat:0.2,hours=3")
    reqs = curve_requests(h100, None, lc, 0)
    scaling = Scaling(min_replicas=1, max_replicas=4, startup_s=0, load_gb_per_s=1e6, scale_down_window_s=0, scrape_interval_s=60)
    run = simulate_fleet([PoolSpec("p", h100, "ar", autoscaler=make_autoscaler("schedule", replicas=hours), scaling=scaling)], reqs, sample_s=3600)
    rows = interval_rows(run, BOUNDS, lc.span_s, 3600)
    assert [r.replicas_max for r in rows] == [1, 3, 1] and [r.replicas_mean for r in rows] == pytest.approx([1, 3, 1], abs=0.01)


def test_every_policy_is_registered_and_checks_its_parameters():
    assert set(autoscaler_names()) >= {"static", "target-utilisation", "queue-depth", "schedule", "request-rate"}
    for bad, needle in (("queue-depth", "target"), ("target-utilisation:target=2", "target"), ("schedule:replicas=1;2", "24"),
                        ("hpa", "unknown autoscaler"), ("static:bogus=1", "no parameter")):
        with pytest.raises(UserError, match=needle):
            parse_autoscaler(bad)


def test_a_request_is_never_lost(h100):
    """Overloaded and autoscaling: every arrival finishes or is rejected (queue full or timed out), counted."""
    lc, reqs = _step_load(h100, 2.0, 30.0, 120.0, seed=4)
    scaling = Scaling(min_replicas=1, max_replicas=3, initial_replicas=1, startup_s=20, load_gb_per_s=50)
    spec = PoolSpec("p", h100, "diffusion", autoscaler=make_autoscaler("queue-depth", target=4), scaling=scaling, max_waiting=40,
                    queue_timeout_s=2.0)
    run = simulate_fleet([spec], reqs, drain_s=3600)
    finished = np.isfinite(run.rec.finish_s)
    full, timed_out = run.rejected == REJECT_FULL, run.rejected == REJECT_TIMEOUT
    assert full.any() and timed_out.any()
    assert not (finished & (run.rejected > 0)).any()
    assert (finished | full | timed_out).all()
    # a timed-out request never started, and it was rejected only after its timeout
    assert np.isnan(run.rec.start_s[timed_out]).all()
    rows = interval_rows(run, BOUNDS, lc.span_s, lc.span_s)
    assert rows[0].requests_rejected == full.sum() and rows[0].requests_timed_out == timed_out.sum() and rows[0].requests_unfinished == 0


@pytest.mark.parametrize("kw, needle", [
    (dict(scaling=Scaling(min_replicas=4, max_replicas=2)), "exceed max"),
    (dict(price_usd_per_gpu_hour=float("nan")), "no price"),
    (dict(router="random"), "unknown router"),
])
def test_bad_pools_are_one_line_errors(h100, kw, needle):
    reqs = build_requests(h100, None, 1.0, n_requests=10, seed=0)
    with pytest.raises(UserError, match=needle):
        simulate_fleet([PoolSpec("p", h100, "ar", **kw)], reqs)


def test_public_trace_formats_replay_with_their_own_times_and_lengths(tmp_path, h100):
    from simulate.cluster.traces import load_trace, trace_requests

    (tmp_path / "azure.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                                        "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:52.0000000,879,0\n2023-11-16 18:15:56.6805900,100,7\n")
    (tmp_path / "burst.csv").write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n"
                                        "45,ChatGPT,1087,0,1087,Conversation log\n47,GPT-4,417,334,751,Conversation log\n")
    (tmp_path / "moon.jsonl").write_text('{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1]}\n'
                                         '{"timestamp": 2500, "input_length": 300, "output_length": 20, "hash_ids": [2]}\n')
    az = load_trace(tmp_path / "azure.csv")
    assert az.fmt == "azure" and az.arrival_s.tolist() == pytest.approx([0, 4.314579, 10.0]) and az.output_tokens.tolist() == [44, 109, 7]
    assert az.dropped == 1
    bg = load_trace(tmp_path / "burst.csv", compress=2)
    assert bg.fmt == "burstgpt" and bg.arrival_s.tolist() == [0, 21] and bg.prompt_tokens.tolist() == [472, 417]
    mc = load_trace(tmp_path / "moon.jsonl")
    assert mc.fmt == "mooncake" and mc.arrival_s.tolist() == [0, 2.5] and mc.prompt_tokens.tolist() == [6955, 300]
    big = load_trace(tmp_path / "azure.csv", rate_scale=3, seed=1)
    assert len(big.arrival_s) == 9 and (np.diff(big.arrival_s) >= 0).all()
    reqs = trace_requests(h100, az, seed=0)
    run = simulate_fleet([static(h100, "ar", 1)], reqs)
    assert np.isfinite(run.rec.finish_s).all()


@pytest.mark.parametrize("text, needle", [
    ("a,b\n1,2\n", "no format read"),
    ("Timestamp,Model,Request tokens,Response tokens\n9,x,1,1\n3,x,1,1\n", "not sorted"),
])
def test_bad_traces_are_one_line_errors(tmp_path, text, needle):
    from simulate.cluster.traces import load_trace

    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(UserError, match=needle) as e:
        load_trace(p)
    assert "\n" not in str(e.value)
    if needle == "no format read":
        assert "Azure" in str(e.value) and "BurstGPT" in str(e.value) and "Mooncake" in str(e.value)


def test_plan_load_curve_prints_the_month(cli, tmp_path):
    code, out, err = cli("plan", "--load-curve", "diurnal:peak=4,trough=2,peak_hour=1,hours=2", "--mode", "mtp", "--hardware", "rtx-5090",
                         "--jobs", "1", "--duration", "30", "-o", str(tmp_path / "day"))
    assert code == 0, err
    assert "The month" in out and "static (peak)" in out and "request-rate" in out and "$/month" in out
    import pandas as pd

    bills = pd.read_csv(tmp_path / "day" / "month.csv")
    assert set(bills.policy) == {"autoscaled", "static"} and (bills.cost_usd_per_month > 0).all()
    hours = pd.read_csv(tmp_path / "day" / "day.csv")
    assert len(hours) == 4 and {"slo_attainment", "goodput_rps", "gpu_hours", "energy_kwh", "cost_usd"} <= set(hours.columns)


@pytest.mark.parametrize("args, needle", [
    (["--load-curve", "diurnal:peak=2"], "needs peak= and trough="),
    (["--load-curve", "flat:2", "--qps", "4"], "--qps does not apply"),
    (["--compress", "2"], "applies to --load-curve only"),
    (["--load-curve", "flat:2", "--slo", "max_utilisation<=1.5"], "utilisation is a share"),
    (["--load-curve", "flat:2", "--autoscale-headroom", "1.2"], "--autoscale-headroom 1.2 is above its bound of 1"),
])
def test_plan_load_curve_bad_input(cli, tmp_path, args, needle):
    code, out, err = cli("plan", *args, "-o", str(tmp_path / "x"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_plan_replays_a_trace_with_its_own_lengths(cli, tmp_path):
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.5, 2400))
    t = t[t < 1200]
    stamps = (np.datetime64("2024-05-10T00:00:00") + (t * 1e6).astype("timedelta64[us]")).astype(str)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"{s.replace('T', ' ')},{p},{o}" for s, p, o in
                                                           zip(stamps, rng.integers(50, 900, len(t)), rng.integers(5, 300, len(t)))]
    (tmp_path / "azure.csv").write_text("\n".join(lines) + "\n")
    code, out, err = cli("plan", "--load-curve", str(tmp_path / "azure.csv"), "--mode", "ar", "--hardware", "rtx-5090", "--jobs", "1",
                         "--duration", "30", "--compress", "1", "-o", str(tmp_path / "day"))
    assert code == 0, err
    assert "azure trace" in out and "$/month" in out
    (tmp_path / "odd.csv").write_text("when,tokens\n1,2\n")
    code, out, err = cli("plan", "--load-curve", str(tmp_path / "odd.csv"), "-o", str(tmp_path / "x"))
    assert code == 2 and "time_s,qps" in err and "Mooncake" in err


def test_plan_a_mixed_fleet_file_over_a_day(cli, tmp_path):
    import json

    fleet = {"pools": [
        {"name": "short", "hardware": "h100-sxm", "mode": "diffusion", "takes": {"max_output_tokens": 200}, "autoscaler": "request-rate:target=3",
         "max": 4},
        {"name": "long", "hardware": "rtx-5090", "mode": "mtp", "autoscaler": "queue-depth:target=24", "router": "least-tokens",
         "price_usd_per_gpu_hour": 0.5},
    ]}
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    code, out, err = cli("plan", "--load-curve", "flat:3,hours=0.5", "--fleet", str(tmp_path / "fleet.json"), "--compress", "1",
                         "-o", str(tmp_path / "day"))
    assert code == 0, err
    assert "short: request-rate" in out and "long: queue-depth" in out and "whole fleet" in out and "the fleet: $" in out
    import pandas as pd

    bills = pd.read_csv(tmp_path / "day" / "month.csv").set_index("policy")
    assert bills.loc["fleet", "cost_usd_per_month"] == pytest.approx(bills.loc["short", "cost_usd_per_month"] + bills.loc["long", "cost_usd_per_month"])
    assert bills.loc["long", "cost_usd_per_month"] == pytest.approx(0.5 * 24 * 365.25 / 12)


@pytest.mark.parametrize("pool, needle", [
    ({"hardware": "h100-sxm", "mode": "mtp", "replicas": 2}, "unknown field"),
    ({"hardware": "h100-sxm"}, 'needs "mode"'),
    ({"hardware": "h100-sxm", "mode": "mtp", "min": 3, "max": 2}, "exceed max"),
    ({"hardware": "h100-sxm", "mode": "mtp", "takes": {"longest": 3}}, "takes must be"),
    ({"hardware": "h100-sxm", "mode": "mtp", "autoscaler": "queue-depth"}, "target"),
])
def test_bad_fleet_files_are_one_line_errors(cli, tmp_path, pool, needle):
    import json

    (tmp_path / "fleet.json").write_text(json.dumps({"pools": [pool]}))
    code, out, err = cli("plan", "--load-curve", "flat:3,hours=0.5", "--fleet", str(tmp_path / "fleet.json"), "-o", str(tmp_path / "x"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_a_headroom_term_grows_the_peak_fleet(cli, tmp_path):
    args = ["plan", "--load-curve", "flat:6,hours=0.2", "--mode", "diffusion", "--hardware", "h100-sxm", "--jobs", "1", "--duration", "30",
            "--compress", "1"]
    code, out, err = cli(*args, "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000", "-o", str(tmp_path / "a"))
    assert code == 0, err
    # a limit below the latency-sized fleet's utilisation at the peak (2 H100s at ~0.10 on the fp8 defaults)
    code, out, err = cli(*args, "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000,max_utilisation<=0.06", "-o", str(tmp_path / "b"))
    assert code == 0, err
    assert "for utilisation" in err
    import pandas as pd

    loose, tight = (pd.read_csv(tmp_path / d / "day.csv") for d in ("a", "b"))
    assert tight.replicas_max.max() > loose.replicas_max.max()
    assert (tight[tight.policy == "static"].utilisation <= 0.06 + 0.02).all()


def test_the_bills_read_back_as_typed_records(cli, tmp_path):
    from costmodel.schemas.day import MonthBill, read_bills

    code, out, err = cli("plan", "--load-curve", "flat:2,hours=0.5", "--mode", "ar", "--hardware", "rtx-5090", "--jobs", "1", "--duration", "30",
                         "--compress", "1", "-o", str(tmp_path / "day"))
    assert code == 0, err
    bills = read_bills(tmp_path / "day")
    assert {b.policy for b in bills} == {"autoscaled", "static"} and all(isinstance(b, MonthBill) and b.cost_usd_per_month > 0 for b in bills)
    assert (tmp_path / "day" / "month.dictionary.csv").is_file() and "cost_usd_per_month" in (tmp_path / "day" / "month.dictionary.md").read_text()
    with pytest.raises(UserError, match="no month.csv"):
        read_bills(tmp_path)


class _EveryOther:
    """A toy autoscaling policy: one replica in even scrapes, two in odd ones (what a new member needs)."""

    name, params, ticks = "every-other", {}, True

    def __init__(self):
        self.n = 0

    def initial(self, n: int) -> int:
        return n

    def desired(self, m, now: float):
        self.n += 1
        return 1 + self.n % 2, None


def test_a_new_router_or_autoscaler_is_one_class_and_one_register_line(h100):
    from simulate import routers
    from simulate.cluster import autoscalers

    routers.register("last-ready", lambda ready: (lambda prompt, out: ready[-1]))
    autoscalers.register(_EveryOther)
    try:
        reqs = build_requests(h100, None, 2.0, n_requests=400, seed=0)
        scaling = Scaling(min_replicas=1, max_replicas=2, scale_down_window_s=0, startup_s=0, load_gb_per_s=1e6)
        run = simulate_fleet([PoolSpec("p", h100, "ar", autoscaler=parse_autoscaler("every-other"), router="last-ready", scaling=scaling)], reqs)
        assert [n for _, n in run.pools[0].scale_log[:4]] == [2, 1, 2, 1]
        assert len(set(run.rec.replica.tolist())) > 1 and np.isfinite(run.rec.finish_s).all()
    finally:
        routers.unregister("last-ready")
        autoscalers.unregister("every-other")
    assert "last-ready" not in router_names() and "every-other" not in autoscaler_names()
