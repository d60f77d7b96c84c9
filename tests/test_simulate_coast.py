"""The event loop's shortcuts change no answer: coasting (a mode's closed-form run of steps in
which nothing but time, KV and contexts change) and lazy replicas (a replica with nothing visible
before an arrival is not run to it) give the results of running every replica one engine step at
a time (what tracing every step does), up to float rounding (the check: tests/conftest.py's
coast_vs_stepping)."""

from __future__ import annotations

import pytest

from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.engine import EngineConfig

PROFILE = resolve_profile(None, "h200")


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_coasting_and_lazy_replicas_match_stepping_one_step_at_a_time(coast_vs_stepping, mode, async_scheduling):
    # three replicas near saturation (queues, admissions between steps, mixed prefill/decode steps)
    kw = dict(replicas=3, n_requests=600, seed=3, engine=EngineConfig(async_scheduling=async_scheduling))
    qps = {"diffusion": 9.0, "ar": 30.0, "mtp": 30.0}[mode]
    fast, differences = coast_vs_stepping(lambda: run_point(PROFILE, mode, qps, **kw))
    assert fast["engine_steps"] > 1000
    assert differences == []


def test_coasting_matches_stepping_under_kv_pressure(coast_vs_stepping):
    # a KV cache that forces preemptions: coasts end where the growth no longer fits (given in tokens,
    # not as a memory share, whose KV depends on the profile's weights: fp8 leaves more)
    kw = dict(replicas=2, n_requests=300, seed=4, engine=EngineConfig(kv_capacity_tokens=12000))
    fast, differences = coast_vs_stepping(lambda: run_point(PROFILE, "ar", 40.0, **kw))
    assert fast["preemptions"] > 10
    assert differences == []
