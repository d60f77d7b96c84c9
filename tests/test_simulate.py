"""The serving simulator: hand-computed unloaded latency, queueing laws, conservation, determinism,
monotonicity, stability detection, KV admission/preemption, routers."""

from __future__ import annotations

import copy
import dataclasses
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.modes import get_mode
from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from costmodel.schemas.profile import Distribution, MtpAcceptance, Provenance
from costmodel.roofline import Segment as S
from simulate.api import run_point, simulate_grid
from simulate.engine import EngineConfig, replica_limits
from costmodel.schemas.results import REQUEST_COLUMNS
from simulate.workload import parse_workload

PROFILE = roofline_profile("h200", "bf16", 0.33)
EXACT = EngineConfig(shape_bits=0)
MODES = ("diffusion", "ar", "mtp")
HYP = settings(max_examples=int(os.environ.get("COSTMODEL_HYPOTHESIS_EXAMPLES", "30")), deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def fixed(prompt: int, output: int, arrival: str = "constant"):
    return parse_workload({"arrival": arrival, "prompt_tokens": prompt, "output_tokens": output})


def with_steps(k: int):
    """The test profile with every regime's canvases converging in exactly k denoising steps."""
    p = copy.deepcopy(PROFILE)
    for cs in p.commit_stats.values():
        cs.steps_per_canvas = Distribution.constant(k)
    return p


def with_acceptance(rate: float):
    p = copy.deepcopy(PROFILE)
    p.mtp_acceptance = MtpAcceptance(4, [rate] * 4, Provenance("published", "test"))
    return p


# ---- unloaded latency by hand ---------------------------------------------------------------------

def hand_ar(p, P, N):
    ttft = p.pass_ms("ar", (S("prefill", 1, P, 0),))
    return ttft, ttft + sum(p.pass_ms("ar", (S("decode_step", 1, 1, P + j),)) for j in range(N - 1))


def hand_mtp(p, P, N, per_step):
    """prefill emits 1 token, and the assistant drafts over it (vLLM's speculator: one pass over the
    prefill's P tokens, then 3 one-token passes); each step: one draft pass over the 5 verified
    tokens, 3 one-token draft passes, one verify of 5 tokens, emitting per_step tokens; the context a
    step sees grows by the mean acceptance length (= per_step here)."""
    ttft = p.pass_ms("mtp", (S("draft_step", 1, P, 0),)) + 3 * p.pass_ms("mtp", (S("draft_step", 1, 1, 0),)) + p.pass_ms("mtp", (S("prefill", 1, P, 0),))
    steps = math.ceil((N - 1) / per_step)
    e2e = ttft
    for j in range(steps):
        ctx = P + per_step * j
        e2e += (p.pass_ms("mtp", (S("draft_step", 1, 5, ctx),)) + 3 * p.pass_ms("mtp", (S("draft_step", 1, 1, ctx),))
                + p.pass_ms("mtp", (S("verify_step", 1, 5, ctx),)))
    return ttft, e2e


def hand_diffusion(p, P, N, k):
    """prefill; per canvas b: k denoise passes and one commit over 256 tokens at context P + 256 b;
    the first output is the end of the first commit."""
    t = p.pass_ms("diffusion", (S("encoder_prefill", 1, P, 0),))
    ttft = None
    for b in range(math.ceil(N / 256)):
        ctx = P + 256 * b
        t += k * p.pass_ms("diffusion", (S("denoise_step", 1, 256, ctx),)) + p.pass_ms("diffusion", (S("encoder_commit", 1, 256, ctx),))
        ttft = t if ttft is None else ttft
    return ttft, t


@pytest.mark.parametrize("P,N", [(300, 40), (1000, 600)])
def test_unloaded_latency_equals_hand_computation(P, N):
    """At 0.01 QPS (constant gaps of 100 s) nothing overlaps: every request sees the unloaded engine."""
    cases = [
        ("ar", PROFILE, hand_ar(PROFILE, P, N)),
        ("mtp", with_acceptance(1.0), hand_mtp(with_acceptance(1.0), P, N, 5)),
        ("mtp", with_acceptance(0.0), hand_mtp(with_acceptance(0.0), P, N, 1)),
        ("diffusion", with_steps(6), hand_diffusion(with_steps(6), P, N, 6)),
    ]
    for mode, prof, (ttft, e2e) in cases:
        df = run_point(prof, mode, 0.01, n_requests=4, workload=fixed(P, N), engine=EXACT).requests
        assert df.finished.all()
        assert np.allclose(df.queue_ms, 0.0, atol=1e-6), mode
        assert np.allclose(df.ttft_ms, ttft, rtol=1e-9), (mode, df.ttft_ms.tolist(), ttft)
        assert np.allclose(df.e2e_ms, e2e, rtol=1e-9), (mode, df.e2e_ms.tolist(), e2e)
        if mode == "diffusion":
            assert (df.blocks == math.ceil(N / 256)).all() and (df.steps == 1 + 7 * math.ceil(N / 256)).all()


def test_unloaded_latency_default_resolution_close_to_exact():
    for mode in MODES:
        a = run_point(PROFILE, mode, 0.01, n_requests=4, workload=fixed(777, 300), engine=EXACT).requests
        b = run_point(PROFILE, mode, 0.01, n_requests=4, workload=fixed(777, 300)).requests
        assert np.allclose(a.e2e_ms, b.e2e_ms, rtol=0.02), mode


def test_idle_gpu_between_requests():
    """With no overlap, busy time is exactly the sum of the requests' latencies: the GPU idles between."""
    for mode in MODES:
        # arrivals at 20, 40, ..., 120 s; the window (130 s) covers every request's service
        r = run_point(PROFILE, mode, 0.05, duration_s=130, workload=fixed(400, 100), engine=EXACT, warmup_frac=0.0)
        s, df = r.summary, r.requests
        assert len(df) == 6 and df.finish_s.max() < 130
        # async scheduling (the GPU default): each diffusion request also runs one wasted denoise step
        # after its last commit (vLLM's DiffusionAsyncScheduler), busy but after its finish
        wasted = 6 * PROFILE.pass_ms("diffusion", (S("denoise_step", 1, 256, 400 + 256),)) / 1e3 if mode == "diffusion" else 0.0
        assert s.gpu_busy_frac * s.duration_s == pytest.approx(df.e2e_ms.sum() / 1e3 + wasted, rel=1e-9)
        assert s.gpu_busy_frac < 0.2
        sync = run_point(PROFILE, mode, 0.05, duration_s=130, workload=fixed(400, 100), engine=EngineConfig(shape_bits=0, async_scheduling=False),
                         warmup_frac=0.0)
        assert sync.summary.gpu_busy_frac * sync.summary.duration_s == pytest.approx(sync.requests.e2e_ms.sum() / 1e3, rel=1e-9)


# ---- queueing properties --------------------------------------------------------------------------

@HYP
@given(mode=st.sampled_from(MODES), qps=st.floats(0.5, 6.0), seed=st.integers(0, 10_000))
def test_littles_law(mode, qps, seed):
    r = run_point(PROFILE, mode, qps, n_requests=300, seed=seed)
    s, df = r.summary, r.requests
    assert s.stable, s.stability_reason
    lam = s.requests_arrived / s.duration_s
    w = df.e2e_ms.mean() / 1e3
    # requests still in the system at the end of the arrival window count fully in W, partly in L
    assert s.mean_in_system == pytest.approx(lam * w, rel=0.1, abs=0.05)


@HYP
@given(mode=st.sampled_from(MODES), qps=st.floats(0.5, 80.0), seed=st.integers(0, 10_000))
def test_every_arrival_finishes_or_is_counted_unfinished(mode, qps, seed):
    r = run_point(PROFILE, mode, qps, n_requests=400, seed=seed)
    s, df = r.summary, r.requests
    assert list(df.columns) == list(REQUEST_COLUMNS)
    assert s.requests_arrived == len(df) == s.requests_finished + s.requests_unfinished
    assert int(df.finished.sum()) == s.requests_finished
    fin = df[df.finished]
    assert fin.finish_s.notna().all() and (fin.finish_s >= fin.first_token_s).all() and (fin.first_token_s > fin.start_s).all()
    assert (fin.start_s >= fin.arrival_s).all()
    assert df[~df.finished].finish_s.isna().all()
    if s.requests_unfinished:
        assert not s.stable


def test_same_seed_identical_results_and_parallel_sweep_matches():
    for mode in MODES:
        a = run_point(PROFILE, mode, 3.0, n_requests=300, seed=7)
        b = run_point(PROFILE, mode, 3.0, n_requests=300, seed=7)
        assert a.requests.equals(b.requests)
        assert _same(dataclasses.asdict(a.summary), dataclasses.asdict(b.summary))
        c = run_point(PROFILE, mode, 3.0, n_requests=300, seed=8)
        assert not a.requests.equals(c.requests)
    serial = simulate_grid(PROFILE, ["ar", "diffusion"], [1.0, 4.0], processes=1, n_requests=200, seed=3)
    parallel = simulate_grid(PROFILE, ["ar", "diffusion"], [1.0, 4.0], processes=2, n_requests=200, seed=3)
    assert [(r.summary.mode, r.summary.qps) for r in serial] == [("ar", 1.0), ("ar", 4.0), ("diffusion", 1.0), ("diffusion", 4.0)]
    for x, y in zip(serial, parallel):
        assert x.requests.equals(y.requests)


def _same(a: dict, b: dict) -> bool:
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not _same(x, y):
                return False
        elif isinstance(x, float) and math.isnan(x):
            if not (isinstance(y, float) and math.isnan(y)):
                return False
        elif x != y:
            return False
    return True


def test_workload_is_the_same_for_every_mode_and_replica_count():
    cols = ["arrival_s", "prompt_tokens", "output_tokens", "regime"]
    base = run_point(PROFILE, "ar", 2.0, n_requests=200, seed=5).requests[cols]
    for mode, reps in [("mtp", 1), ("diffusion", 1), ("ar", 3)]:
        assert run_point(PROFILE, mode, 2.0, n_requests=200, seed=5, replicas=reps).requests[cols].equals(base)


@pytest.mark.parametrize("mode", MODES)
def test_latency_rises_with_qps(mode):
    e2e = [run_point(PROFILE, mode, q, n_requests=400, seed=1).summary.e2e_ms["mean"] for q in (0.25, 2.0, 6.0)]
    assert e2e[0] < e2e[1] < e2e[2], e2e


@HYP
@given(mode=st.sampled_from(MODES), q1=st.floats(0.2, 3.0), factor=st.floats(2.0, 4.0), seed=st.integers(0, 1000))
def test_latency_rises_with_qps_property(mode, q1, factor, seed):
    """Same seed: the higher rate replays the same requests with every gap shrunk by `factor`."""
    lo = run_point(PROFILE, mode, q1, n_requests=250, seed=seed).summary
    hi = run_point(PROFILE, mode, q1 * factor, n_requests=250, seed=seed).summary
    assert hi.e2e_ms["mean"] >= lo.e2e_ms["mean"] * 0.99
    assert hi.queue_ms["mean"] >= lo.queue_ms["mean"] - 1e-6


# ---- stability --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,overload", [("diffusion", 60.0), ("ar", 120.0), ("mtp", 120.0)])
def test_overload_is_unstable(mode, overload):
    s = run_point(PROFILE, mode, overload, duration_s=120, seed=0).summary
    assert not s.stable and s.stability_reason
    assert s.requests_unfinished > 0
    assert s.throughput_rps < overload * 0.9


def test_backlog_trend_detects_mild_overload_without_abort():
    cap = run_point(PROFILE, "diffusion", 60.0, duration_s=60, seed=0).summary.throughput_rps  # saturated service rate
    s = run_point(PROFILE, "diffusion", cap * 1.4, duration_s=200, seed=0, abort_backlog_s=None).summary
    assert not s.stable and "backlog grew" in s.stability_reason
    ok = run_point(PROFILE, "diffusion", cap * 0.6, duration_s=200, seed=0, abort_backlog_s=None).summary
    assert ok.stable, ok.stability_reason


def test_unfinished_after_drain_is_unstable():
    s = run_point(PROFILE, "ar", 4.0, n_requests=200, seed=0, drain_s=0.0).summary
    assert s.requests_unfinished > 0 and not s.stable and "unfinished" in s.stability_reason


def test_overloaded_run_stops_early():
    s = run_point(PROFILE, "diffusion", 200.0, duration_s=600, seed=0).summary
    assert "aborted" in s.stability_reason
    assert s.requests_arrived < 200 * 600 and s.simulated_s < 600


# ---- KV cache ----------------------------------------------------------------------------------------

def test_replica_limits_come_from_the_memory_model():
    """vLLM 0.32's defaults on an H200 (costmodel/memory.py): DiffusionGemma's max_num_seqs rule (8),
    Hopper batch defaults for AR/MTP; KV in blocks of the hybrid layout, as context tokens."""
    ctx = [1024] * 10
    d = replica_limits(PROFILE, get_mode("diffusion"), EngineConfig(), ctx)
    ar = replica_limits(PROFILE, get_mode("ar"), EngineConfig(), ctx)
    mtp = replica_limits(PROFILE, get_mode("mtp"), EngineConfig(), ctx)
    assert (d.cfg.max_num_seqs, d.max_running, d.running_binding) == (8, 8, "max_num_seqs")
    assert (ar.cfg.max_num_seqs, ar.cfg.max_num_batched_tokens, ar.cfg.gpu_memory_utilization) == (1024, 8192, 0.92)
    assert ar.running_binding == "kv blocks" and ar.kv_capacity_tokens == ar.max_running * 1024
    assert mtp.max_running < ar.max_running  # the assistant's weights and the 1 + 2k lookahead slots
    # long contexts: the 25 sliding-window layers keep 1,024 tokens, so a replica holds more tokens
    assert replica_limits(PROFILE, get_mode("ar"), EngineConfig(), [16384] * 10).kv_capacity_tokens > ar.kv_capacity_tokens
    assert replica_limits(PROFILE, get_mode("ar"), EngineConfig(gpu_memory_utilization=0.7), ctx).kv_capacity_tokens < ar.kv_capacity_tokens
    with pytest.raises(UserError, match="needs .* GB for weights"):
        replica_limits(PROFILE, get_mode("ar"), EngineConfig(gpu_memory_utilization=0.3), ctx)


@pytest.mark.parametrize("mode", MODES)
def test_preemption_engages_when_memory_is_tiny(mode):
    wl = fixed(512, 300, arrival="poisson")
    small = EngineConfig(kv_capacity_tokens=4000)
    r = run_point(PROFILE, mode, 4.0, n_requests=150, seed=2, workload=wl, engine=small, abort_backlog_s=None)
    s, df = r.summary, r.requests
    assert s.preemptions > 0 and int(df.preemptions.sum()) == s.preemptions
    assert df.finished.all() and s.kv_capacity_tokens == 4000
    big = run_point(PROFILE, mode, 4.0, n_requests=150, seed=2, workload=wl).summary
    assert big.preemptions == 0
    assert s.e2e_ms["mean"] > big.e2e_ms["mean"]


def test_request_larger_than_kv_cache_is_a_user_error():
    with pytest.raises(UserError, match="more than the KV cache holds"):
        run_point(PROFILE, "ar", 1.0, n_requests=5, workload=fixed(3000, 100), engine=EngineConfig(kv_capacity_tokens=2000))


def test_kv_accounting_returns_to_zero():
    """Admission, growth, preemption and finish keep exact books: an empty engine holds no KV."""
    from simulate.sim import simulate_point
    from simulate.workload import build_requests

    for mode in MODES:
        reqs = build_requests(PROFILE, fixed(512, 300, "poisson"), 4.0, n_requests=120, seed=2)
        captured = {}
        import simulate.sim as simmod

        orig = simmod.engine_for

        def spy(m, orig=orig):
            cls = orig(m)

            class Spy(cls):
                def __init__(self, *a, **kw):
                    super().__init__(*a, **kw)
                    captured.setdefault("reps", []).append(self)

                def schedule(self):
                    dt = super().schedule()
                    assert self.kv_used + self.kv_reserved <= self.kv_cap + 1e-6
                    return dt

            return Spy

        simmod.engine_for = spy
        try:
            simulate_point(PROFILE, get_mode(mode), reqs, replicas=1, cfg=EngineConfig(kv_capacity_tokens=4000), router="least-outstanding", seed=2,
                           warmup_frac=0.1, abort_backlog_s=None, drain_s=None, workload_desc="")
        finally:
            simmod.engine_for = orig
        rep = captured["reps"][0]
        assert rep.preemptions > 0
        assert abs(rep.kv_used) < 1e-6 and rep.kv_reserved == 0 and not rep.running and not rep.events.get(rep.step)


# ---- routers, batch composition ---------------------------------------------------------------------

def test_routers():
    rr = run_point(PROFILE, "ar", 4.0, n_requests=60, seed=0, replicas=3, router="round-robin").requests
    assert (rr.replica == rr.request_id % 3).all()
    lo = run_point(PROFILE, "ar", 4.0, n_requests=300, seed=0, replicas=3).requests
    counts = lo.replica.value_counts()
    assert set(counts.index) == {0, 1, 2} and counts.max() - counts.min() < 40
    with pytest.raises(UserError, match="unknown router"):
        run_point(PROFILE, "ar", 4.0, n_requests=10, router="random")


def test_more_replicas_lower_latency():
    one = run_point(PROFILE, "ar", 6.0, n_requests=400, seed=0).summary
    two = run_point(PROFILE, "ar", 6.0, n_requests=400, seed=0, replicas=2).summary
    assert two.e2e_ms["p95"] < one.e2e_ms["p95"] and two.gpu_busy_frac <= one.gpu_busy_frac


def test_batch_composition_and_diffusion_bursts():
    s = run_point(PROFILE, "diffusion", 6.0, n_requests=300, seed=0).summary
    comp = s.batch_composition
    assert set(comp) == {"encoder_prefill", "denoise_step", "encoder_commit"}
    assert comp["denoise_step"] > comp["encoder_commit"] > 0
    assert s.mean_batch_seqs == pytest.approx(sum(comp.values()))
    flat = s.flat()
    assert "batch_denoise_step_seqs" in flat and "ttft_ms_p95" in flat
    # one-canvas outputs arrive in one burst: TTFT == E2E, TPOT 0
    df = run_point(PROFILE, "diffusion", 1.0, n_requests=50, seed=0).requests
    one = df[df.blocks == 1]
    assert np.allclose(one.ttft_ms, one.e2e_ms) and (one.tpot_ms.dropna() == 0).all()
    m = run_point(PROFILE, "mtp", 2.0, n_requests=100, seed=0).summary
    assert set(m.batch_composition) == {"prefill", "verify_step", "draft_step"}


def test_engine_limits_cap_concurrency():
    s = run_point(PROFILE, "ar", 8.0, n_requests=300, seed=0, engine=EngineConfig(max_num_seqs=4)).summary
    assert s.mean_batch_seqs <= 4 + 1e-9
    d = run_point(PROFILE, "diffusion", 8.0, n_requests=200, seed=0, engine=EngineConfig(max_num_batched_tokens=512), abort_backlog_s=None).summary
    assert d.mean_batch_tokens <= 512 + 1e-9
    with pytest.raises(UserError, match="canvas_length 256 does not fit"):  # a canvas must fit the step's token budget
        run_point(PROFILE, "diffusion", 1.0, n_requests=5, engine=EngineConfig(max_num_batched_tokens=128))


def test_engine_defaults_come_from_the_profile_then_overrides():
    p = copy.deepcopy(PROFILE)
    p.engine = {"name": "vllm", "max_num_seqs": 48, "max_num_batched_tokens": "auto", "gpu_memory_utilization": 0.85}
    cfg = EngineConfig.for_profile(p)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.gpu_memory_utilization) == (48, None, 0.85)  # None: vLLM's default
    assert EngineConfig.for_profile(p, max_num_seqs=8, max_num_batched_tokens=None).max_num_seqs == 8
    assert run_point(p, "ar", 1.0, n_requests=20).summary.max_num_seqs == 48


def test_a_replica_class_without_the_engine_part_is_refused_when_built():
    from simulate.engines.ar import ArReplica
    from simulate.metrics import Records
    from simulate.scheduler import Replica

    class HalfEngine(Replica):
        def schedule(self):
            return 0.0

    def build(cls):
        return cls(0, [], EngineConfig(max_num_seqs=4, max_num_batched_tokens=64), 1000, None, Records(3), None)

    with pytest.raises(TypeError, match="HalfEngine is not an engine: it does not implement complete, enter_decode, drop_decoder"):
        build(HalfEngine)
    assert build(ArReplica).max_seqs == 4


def test_a_small_grid_runs_in_this_process_without_workers():
    """A few hundred requests in all: simulated here, serially (starting workers would cost more than the grid)."""
    from simulate.parallel import SERIAL_REQUESTS, _small

    assert _small([("ar", 1.0), ("mtp", 1.0)], {"n_requests": 10})
    assert not _small([("ar", 20.0)] * 3, {"duration_s": 300.0})
    assert not _small([("ar", None)], {"duration_s": 60.0})  # a trace at its own rate: length unknown, so large
    assert _small([("ar", 2.0)], {"duration_s": SERIAL_REQUESTS / 2.0})
