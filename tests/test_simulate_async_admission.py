"""When an arrival is first scheduled under async scheduling (vLLM's EngineCore.step_with_batch_queue): the engine
core schedules step N+1 once step N is launched and step N-1's output is taken in. A CUDA-graph step that follows
another was launched while that one ran, so N+1 is scheduled as N starts and an arrival during N waits for N+2; an
eager step's launch, or the whole launch of the step an idle engine starts, holds the host first, and an arrival
before it ends joins N+1 (simulate/scheduler.py Replica.start, `sched_next_s`)."""

from __future__ import annotations

import numpy as np

from costmodel.engine_settings import EngineSettings
from costmodel.modes import get_mode
from costmodel.shipped import resolve_profile
from simulate.sim import simulate_point
from simulate.workload import Requests

PROFILE = resolve_profile(None, "h200")  # AR: CUDA graphs up to 512 tokens


def _steps(arrival_s, prompts, outputs, async_scheduling=True):
    """Every engine step of the requests (AR), traced: [(start s, seconds, prefill chunks, prefill tokens), ...]."""
    n = len(arrival_s)
    reqs = Requests(np.array(arrival_s, float), np.array(prompts, np.int64), np.array(outputs, np.int64), np.zeros(n, np.int64), ("R1",),
                    0.0, 1.0)
    cfg = EngineSettings(async_scheduling=async_scheduling, shape_bits=0, kv_capacity_tokens=10**6, max_num_batched_tokens=8192,
                         max_num_seqs=64)
    trace: list = []
    simulate_point(PROFILE, get_mode("ar"), reqs, replicas=1, cfg=cfg, router="least-outstanding", seed=0, warmup_frac=0.0,
                   abort_backlog_s=None, drain_s=None, workload_desc="admission", step_trace=trace)
    return [(t[2], t[3], t[4], t[5]) for t in trace]


def eager_launch_s() -> float:
    """The eager launch the simulator prices: a lone prefill one token past the largest CUDA graph."""
    reqs = Requests(np.zeros(1), np.array([10], np.int64), np.array([2], np.int64), np.zeros(1, np.int64), ("R1",), 0.0, 1.0)
    (_, _), pricer = simulate_point(PROFILE, get_mode("ar"), reqs, replicas=1, cfg=EngineSettings(async_scheduling=True, shape_bits=0),
                                    router="least-outstanding", seed=0, warmup_frac=0.0, abort_backlog_s=None, drain_s=None,
                                    workload_desc="one")
    graph_max = int(pricer.cost.graph_max_tokens)
    return pricer.price(1, graph_max + 1, 0, (0,), (0.0,))


def _prefill_step(steps, tokens):
    """Index of the first step that prefills `tokens` tokens."""
    return next(k for k, s in enumerate(steps) if s[3] == tokens)


def test_an_arrival_during_an_idle_engines_first_step_joins_the_next():
    """A lone 300-token prompt wakes the engine (a CUDA-graph prefill step); a 200-token prompt arriving during it is
    prefilled in the very next step: nothing ran before to launch that first step, so vLLM scheduled the next one
    only after it."""
    steps = _steps([0.0, 0.004], [300, 200], [50, 50])
    assert steps[0][3] == 300 and 0.004 < steps[0][1]
    assert steps[1][3] == 200


def test_an_arrival_during_a_graph_step_in_a_running_batch_waits_two_steps():
    """With a request decoding (CUDA-graph steps launched while the one before ran), a prompt arriving during a step
    is first scheduled two steps on."""
    steps = _steps([0.0, 0.1], [300, 200], [200, 50])
    k = next(i for i, s in enumerate(steps) if s[0] <= 0.1 < s[0] + s[1])  # the step in flight at the arrival
    assert steps[k][3] == 0 and steps[k + 1][3] == 0 and steps[k + 2][3] == 200


def test_an_arrival_during_an_eager_steps_launch_joins_the_next_step():
    """A 6,000-token prompt's eager prefill step: its launch (the profile's smallest eager step) holds the host before
    the next step is scheduled. A prompt arriving early in it joins the next step; one arriving after the launch waits
    one more step. Without async scheduling every arrival joins the next step."""
    base = _steps([0.0, 0.1], [300, 6000], [400, 20])
    k = _prefill_step(base, 6000)
    start, dt = base[k][0], base[k][1]
    launch_s = min(eager_launch_s(), dt)
    early = _steps([0.0, 0.1, start + launch_s / 2], [300, 6000, 200], [400, 20, 20])
    late = _steps([0.0, 0.1, start + (launch_s + dt) / 2], [300, 6000, 200], [400, 20, 20])
    assert early[k][3] == 6000 and early[k + 1][3] == 200
    assert late[k][3] == 6000 and late[k + 1][3] == 0 and late[k + 2][3] == 200
    sync = _steps([0.0, 0.1, start + (launch_s + dt) / 2], [300, 6000, 200], [400, 20, 20], async_scheduling=False)
    j = _prefill_step(sync, 6000)
    assert sync[j + 1][3] == 200
