"""Async scheduling hands a step's outputs back once the next step is launched, and a step past the largest CUDA
graph is launched kernel by kernel from the host (vLLM 0.26 on an H200: the recorded step before an eager prefill
carries its time). So a first token whose next step is eager is seen that launch later (simulate/scheduler.py
Replica.start): two long prompts that share the token budget are prefilled in consecutive eager steps, and the
first one's first token waits for the second's launch, priced as the profile's smallest eager step."""

from __future__ import annotations

import numpy as np

from costmodel.engine_settings import EngineSettings
from costmodel.modes import get_mode
from costmodel.schemas.profile import frontend_latency_ms
from costmodel.shipped import resolve_profile
from simulate.sim import simulate_point
from simulate.workload import Requests

PROFILE = resolve_profile(None, "h200")  # AR: CUDA graphs up to 512 tokens


def _run(async_scheduling: bool):
    """A decoding request, then two 6,000-token prompts 6 ms apart, each arriving during another step (async: each
    admitted two steps on, so they are prefilled in consecutive eager steps); every step traced (start s, seconds,
    prefill tokens)."""
    reqs = Requests(np.array([0.0, 0.5, 0.506]), np.array([200, 6000, 6000], np.int64), np.array([400, 20, 20], np.int64),
                    np.zeros(3, np.int64), ("R1",), 0.0, 1.0)
    cfg = EngineSettings(async_scheduling=async_scheduling, shape_bits=0, kv_capacity_tokens=10**6, max_num_batched_tokens=8192, max_num_seqs=64)
    trace: list = []
    (_, df), pricer = simulate_point(PROFILE, get_mode("ar"), reqs, replicas=1, cfg=cfg, router="least-outstanding", seed=0, warmup_frac=0.0,
                                     abort_backlog_s=None, drain_s=None, workload_desc="two long prompts", step_trace=trace)
    first_s = df["ttft_ms"].to_numpy() / 1e3 + df["arrival_s"].to_numpy() - frontend_latency_ms(PROFILE, "ar") / 1e3
    return [(t[2], t[3], t[5]) for t in trace], first_s, pricer


def test_a_first_token_waits_for_the_next_eager_steps_launch():
    steps, first_s, pricer = _run(async_scheduling=True)
    i = next(k for k, (start, _, tp) in enumerate(steps) if start >= 0.5 and tp == 6000)  # the first prompt's prefill
    (a_start, a_s, _), (b_start, b_s, b_tp) = steps[i], steps[i + 1]
    assert b_tp == 6000 and b_start == a_start + a_s  # the second prompt's: an eager step right after
    launch_s = pricer.price(1, 513, 0, (0,), (0.0,))  # the smallest eager step
    assert 0 < launch_s < b_s
    assert np.isclose(first_s[1], a_start + a_s + launch_s)  # seen once the next step is launched
    assert np.isclose(first_s[2], b_start + b_s)  # the step after the second's is a CUDA graph's: seen as its own step ends


def test_no_hand_off_without_async_scheduling():
    steps, first_s, _ = _run(async_scheduling=False)
    i = next(k for k, (start, _, tp) in enumerate(steps) if start >= 0.5 and tp == 6000)
    assert np.isclose(first_s[1], steps[i][0] + steps[i][1])
