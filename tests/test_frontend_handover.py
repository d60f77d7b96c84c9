"""The front end hands requests to the engine one at a time (issue 49, p95 TTFT modelled): vLLM's AsyncLLM processes
each request's input in its event loop, so a burst sent at once reaches the engine core spread out; an idle engine core
steps shortly after the first arrival, on what has arrived by then, and the rest wait behind that step. The simulator
models a single-server queue per replica ahead of the engine and the idle engine's pickup (simulate/sim.py, profile
engine["frontend_handover_ms"] and ["engine_pickup_ms"]); both are read off the recorded opening bursts."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from costmodel.engine_settings import EngineSettings
from costmodel.modes import get_mode
from costmodel.schemas.profile import ENGINE_PICKUP_KEY, FRONTEND_HANDOVER_KEY, engine_pickup_ms, frontend_handover_ms
from costmodel.shipped import resolve_profile
from simulate.calibrate import engine_pickup_fit, frontend_handover_fit
from simulate.sim import simulate_point
from simulate.workload import Requests

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"
SHIPPED = resolve_profile(None, "h200")


def with_handover(profile, mode: str, ms: float | None, pickup_ms: float | None = None):
    """`profile` with the front end handing `mode`'s requests over `ms` apart and the idle engine stepping `pickup_ms`
    after the request that wakes it (None: the key absent)."""
    p = copy.deepcopy(profile)
    for key, v in ((FRONTEND_HANDOVER_KEY, ms), (ENGINE_PICKUP_KEY, pickup_ms)):
        p.engine.pop(key, None)
        if v is not None:
            p.engine[key] = {mode: {"ms": v}}
    p.__dict__.pop("_resolved", None)
    return p


def burst(profile, n: int = 16, prompt: int = 1000, concurrency: int = 0):
    """n requests of `prompt` tokens sent at once (an open loop's, or a closed loop's opening with `concurrency`
    clients), every engine step traced: (per-request rows, [(start s, prefill chunks), ...])."""
    reqs = Requests(np.zeros(n), np.full(n, prompt, np.int64), np.full(n, 32, np.int64), np.zeros(n, np.int64), ("R1",), 0.0, 1.0,
                    concurrency=concurrency)
    cfg = EngineSettings(async_scheduling=True, shape_bits=0, kv_capacity_tokens=10**6, max_num_batched_tokens=8192, max_num_seqs=64)
    trace: list = []
    (_, df), _ = simulate_point(profile, get_mode("ar"), reqs, replicas=1, cfg=cfg, router="least-outstanding", seed=0, warmup_frac=0.0,
                                abort_backlog_s=None, drain_s=None, workload_desc="a burst", step_trace=trace)
    return df, [(t[2], t[4]) for t in trace if t[4]]


def test_a_profile_without_the_key_hands_over_at_once():
    """Old profiles load and behave as before: no key, no queue (0 ms is the same)."""
    bare = with_handover(SHIPPED, "ar", None)
    assert frontend_handover_ms(bare, "ar") == 0.0 and engine_pickup_ms(bare, "ar") == 0.0
    a, _ = burst(bare)
    b, _ = burst(with_handover(SHIPPED, "ar", 0.0, 0.0))
    assert np.array_equal(a["ttft_ms"].to_numpy(), b["ttft_ms"].to_numpy())


@pytest.mark.parametrize("concurrency", [0, 16])
def test_a_burst_sent_at_once_reaches_the_engine_over_its_first_steps(concurrency):
    """16 prompts of 1,000 tokens sent at once. Handed over at once, the first step fills the 8,192-token budget (9
    prompts, the last a chunk); handed over 0.26 ms apart, the engine steps on the first alone and takes the rest in after it, as vLLM
    did on the H200 (its first step held 1-5 of such a burst; the rest arrive during that first step's launch and join the
    next step): the burst's last first tokens come later."""
    at_once, steps0 = burst(with_handover(SHIPPED, "ar", None), concurrency=concurrency)
    queued, steps1 = burst(with_handover(SHIPPED, "ar", 0.26), concurrency=concurrency)
    assert steps0[0] == (0.0, 9) and steps1[0] == (pytest.approx(0.26e-3), 1)
    assert [m for _, m in steps1[:3]] == [1, 9, 7]
    assert queued["ttft_ms"].max() > at_once["ttft_ms"].max() + 20
    assert np.percentile(queued["ttft_ms"], 95) > np.percentile(at_once["ttft_ms"], 95)
    waits = queued["queue_ms"].to_numpy()  # from the send: the handover queue, then the engine's
    assert waits[0] == pytest.approx(0.26) and np.all(np.diff(waits) >= 0) and waits[1] > 10


@pytest.mark.parametrize("concurrency", [0, 16])
def test_an_idle_engine_steps_on_what_reached_it_within_its_pickup(concurrency):
    """With a 1 ms pickup and 0.26 ms handovers the idle engine's first step takes the first four of the burst (handed
    over at 0.26, 0.52, 0.78 and 1.04 ms; it steps at 1.26 ms); a lone request waits one handover and one pickup."""
    _, steps = burst(with_handover(SHIPPED, "ar", 0.26, 1.0), concurrency=concurrency)
    assert steps[0] == (pytest.approx(1.26e-3), 4)
    one, _ = burst(with_handover(SHIPPED, "ar", 0.26, 1.0), n=1)
    assert one["queue_ms"].iloc[0] == pytest.approx(1.26)


def test_requests_far_apart_each_wait_one_handover():
    """An open loop whose sends are further apart than a handover: each reaches the engine one handover after its send
    (Lindley: max(send, previous handover) + handover), no queue builds."""
    reqs = Requests(np.array([0.0, 0.5, 1.0]), np.full(3, 200, np.int64), np.full(3, 8, np.int64), np.zeros(3, np.int64), ("R1",), 0.0, 1.0)
    cfg = EngineSettings(async_scheduling=True, shape_bits=0, kv_capacity_tokens=10**6)
    (_, df), _ = simulate_point(with_handover(SHIPPED, "ar", 2.0), get_mode("ar"), reqs, replicas=1, cfg=cfg, router="least-outstanding",
                                seed=0, warmup_frac=0.0, abort_backlog_s=None, drain_s=None, workload_desc="three")
    assert df["queue_ms"].to_numpy() == pytest.approx([2.0, 2.0, 2.0])


def test_the_handover_is_the_gap_between_a_bursts_consecutive_sends():
    """Per burst the median gap after the first send's (the event loop's first pass is longer), the median over bursts."""
    fit = frontend_handover_fit([("a", (0.0, 0.0006, 0.0009, 0.0012, 0.0015)), ("b", (0.0, 0.0005, 0.0007, 0.0009)), ("c", (0.0,))])
    assert fit["ms"] == pytest.approx(0.25) and fit["loads"] == ["a", "b"] and fit["per_burst_ms"] == [0.3, 0.2]
    assert frontend_handover_fit([]) is None


def test_the_pickup_is_where_the_engines_first_step_stopped_taking_the_burst():
    """A burst's first step held its first k sends: the pickup lies between the k-th send and the next (after the
    first); a step that filled the budget or held the whole burst says nothing (None)."""
    fit = engine_pickup_fit([("a", (0.0, 0.0003, 0.0006, 0.0009), 2), ("b", (0.0, 0.0002, 0.0004), 1), ("full", (0.0, 0.0002), None),
                             ("all", (0.0, 0.0002), 2)], 0.25)
    assert fit["loads"] == ["a", "b"] and fit["per_burst_ms"] == [0.45, 0.1] and fit["ms"] == pytest.approx(0.275)


def test_the_recorded_bursts_give_one_handover_and_one_pickup_per_mode():
    """On the H200 runs: every fitted closed loop of 4+ clients' opening burst, per mode. The send gaps agree across
    loads, settings and engine starts within a factor of about two, and between modes (DiffusionGemma's front end also
    runs its tokenizer: a little longer). The engine's first step held 1-4 of a burst (AR): a pickup of a few tenths
    of a ms; MTP's first steps took more of theirs (up to 19 short prompts): its pickup is longer and spreads more."""
    from measure.validate.engine_campaign import recorded_setups
    from simulate.validate.engine_loads import opening_bursts

    setups = recorded_setups(ROOT, "h200", "fp8")
    bursts = {m: opening_bursts([s for s in setups if s.mode == m]) for m in ("ar", "mtp", "diffusion")}
    hand = {m: frontend_handover_fit([(lb, s) for lb, s, _ in b]) for m, b in bursts.items()}
    pick = {m: engine_pickup_fit(b, hand[m]["ms"]) for m, b in bursts.items()}
    for m, f in hand.items():
        assert len(f["loads"]) >= 10, m
        assert 0.15 < f["ms"] < 0.45, (m, f["ms"])
        assert np.percentile(f["per_burst_ms"], 90) < 2.5 * f["ms"], m
    assert hand["ar"]["ms"] == pytest.approx(hand["mtp"]["ms"], rel=0.25)
    assert 0.2 < pick["ar"]["ms"] < 1.0 and len(pick["ar"]["loads"]) >= 10
    assert pick["mtp"]["ms"] > pick["ar"]["ms"] and max(pick["mtp"]["per_burst_ms"]) > 4


def test_the_fit_writes_the_handover_beside_the_constant_and_says_how():
    """simulate/validate/engine_loads.py with_frontend_latency: the handover first (from the bursts), then the constant
    fitted by simulation with it in place; one line each."""
    from measure.validate.engine_campaign import recorded_setups
    from simulate.validate.engine_loads import with_frontend_latency

    setups = [s for s in recorded_setups(ROOT, "h200", "fp8") if s.mode == "ar" and s.path.parent.name in ("h200-fp8-ar", "h200-fp8-ar-full2")]
    prof = with_handover(SHIPPED, "ar", None)
    msgs = with_frontend_latency(prof, [replace(s) for s in setups])
    assert frontend_handover_ms(prof, "ar") > 0 and engine_pickup_ms(prof, "ar") > 0
    assert any(m.startswith("ar: front-end handover ") and "opening bursts" in m for m in msgs)
    assert any(m.startswith("ar: idle engine pickup ") for m in msgs)
    assert any(m.startswith("ar: front-end latency ") for m in msgs)


def test_several_replicas_and_a_fleet_add_the_handover_and_pickup_once_each():
    """With several replicas (and in a fleet, whose replicas come and go) the queue is not simulated: a request is seen
    the handover and the pickup later, as a lone request meets them, and a static fleet still gives the point's
    per-request results (tests/test_cluster.py)."""
    from simulate.cluster.fleet import simulate_fleet
    from simulate.cluster.pool import PoolSpec, Scaling
    from simulate.engine import EngineConfig
    from simulate.workload import build_requests

    prof = with_handover(SHIPPED, "mtp", 0.25, 1.3)
    reqs = build_requests(prof, None, 5.0, n_requests=300, seed=3)
    (_, df), _ = simulate_point(prof, get_mode("mtp"), reqs, replicas=3, cfg=EngineConfig.for_profile(prof), router="least-outstanding",
                                seed=3, warmup_frac=0.1, abort_backlog_s=None, drain_s=None, workload_desc="")
    run = simulate_fleet([PoolSpec("p", prof, "mtp", scaling=Scaling(min_replicas=3, max_replicas=3, initial_replicas=3))], reqs, seed=3,
                         drain_s=max(120.0, reqs.window_s))
    assert np.array_equal(run.rec.first_s, df["first_token_s"].to_numpy(), equal_nan=True)
    (_, bare), _ = simulate_point(with_handover(SHIPPED, "mtp", None), get_mode("mtp"), reqs, replicas=3, cfg=EngineConfig.for_profile(prof),
                                  router="least-outstanding", seed=3, warmup_frac=0.1, abort_backlog_s=None, drain_s=None, workload_desc="")
    assert df["ttft_ms"].to_numpy() - bare["ttft_ms"].to_numpy() == pytest.approx(np.full(len(df), 1.55))
