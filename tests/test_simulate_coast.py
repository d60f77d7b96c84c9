"""The event loop's shortcuts change no answer: coasting (a mode's closed-form run of steps in
which nothing but time, KV and contexts change) and lazy replicas (a replica with nothing visible
before an arrival is not run to it) give the results of running every replica one engine step at
a time (what tracing every step does), up to float rounding."""

from __future__ import annotations

import dataclasses
import math

import pytest

from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.engine import EngineConfig
import simulate.sim as simmod

PROFILE = resolve_profile(None, "h200")


def _numbers(res) -> dict:
    s = dataclasses.asdict(res.summary)
    return {k: v for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _step_every_replica(monkeypatch) -> None:
    """Every step recorded from here on: no coasting, every replica stepped at every event."""
    engine_for = simmod.engine_for

    def traced(mode: str):
        class Traced(engine_for(mode)):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.trace = []

        return Traced

    monkeypatch.setattr(simmod, "engine_for", traced)


def _same(a: dict, b: dict) -> list:
    return [(k, a[k], b[k]) for k in a if not (a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k]))
                                               or math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12))]


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_coasting_and_lazy_replicas_match_stepping_one_step_at_a_time(monkeypatch, mode, async_scheduling):
    # three replicas near saturation (queues, admissions between steps, mixed prefill/decode steps)
    kw = dict(replicas=3, n_requests=600, seed=3, engine=EngineConfig(async_scheduling=async_scheduling))
    qps = {"diffusion": 9.0, "ar": 30.0, "mtp": 30.0}[mode]
    fast = _numbers(run_point(PROFILE, mode, qps, **kw))
    _step_every_replica(monkeypatch)
    stepped = _numbers(run_point(PROFILE, mode, qps, **kw))
    assert fast["engine_steps"] > 1000
    assert _same(fast, stepped) == []


def test_coasting_matches_stepping_under_kv_pressure(monkeypatch):
    # a KV cache that forces preemptions: coasts end where the growth no longer fits
    kw = dict(replicas=2, n_requests=300, seed=4, engine=EngineConfig(gpu_memory_utilization=0.41))
    fast = run_point(PROFILE, "ar", 40.0, **kw)
    _step_every_replica(monkeypatch)
    stepped = run_point(PROFILE, "ar", 40.0, **kw)
    assert fast.summary.preemptions > 10
    assert _same(_numbers(fast), _numbers(stepped)) == []
