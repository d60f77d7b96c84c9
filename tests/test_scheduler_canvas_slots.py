"""vLLM's admission and canvas-slot rule for diffusion (simulate/engines/diffusion.py; vLLM 0.32
vllm/v1/core/sched/scheduler.py Scheduler.schedule): where the token budget holds fewer canvases
than max_num_seqs, up to max_num_seqs requests are admitted and prefilled, the first budget //
canvas of them in running order denoise, and the others wait, prefilled, for a canvas slot. Where
the budget is not a whole number of canvases, the next one in running order denoises a partial
canvas of the budget left (vLLM's RUNNING loop cuts its draft tokens to the budget)."""

from __future__ import annotations

import copy
import numpy as np
import pytest

from costmodel.modes import get_mode
from costmodel.engine_settings import EngineSettings
from costmodel.schemas.profile import ENGINE_PICKUP_KEY, FRONTEND_HANDOVER_KEY
from costmodel.shipped import resolve_profile
from simulate.sim import simulate_point
from simulate.workload import Requests

PROFILE = copy.copy(resolve_profile(None, "h200"))  # canvas 256
# requests "arriving together" reach the scheduler together: without the front end's one-at-a-time handover and the
# idle engine's pickup (tests/test_frontend_handover.py holds those), the scheduler's own rule is what these tests see
PROFILE.engine = {k: v for k, v in PROFILE.engine.items() if k not in (FRONTEND_HANDOVER_KEY, ENGINE_PICKUP_KEY)}


def _run(n: int, k: int, blocks: int, outputs=None, prompts=None, **engine):
    """n requests arriving together, 16-token prompts, `blocks` canvases of k denoising steps each
    (or `outputs` tokens each); every engine step traced: (prefill requests, denoising canvases,
    committing canvases) per step."""
    out = np.full(n, 256 * blocks, np.int64) if outputs is None else np.asarray(outputs, np.int64)
    prompt = np.full(n, 16, np.int64) if prompts is None else np.asarray(prompts, np.int64)
    reqs = Requests(np.zeros(n), prompt, out, np.zeros(n, np.int64), ("R1",), 0.0, 1.0,
                    recorded={"steps_per_canvas": [[k] * blocks for _ in range(n)]})
    cfg = EngineSettings(async_scheduling=False, shape_bits=0, kv_capacity_tokens=10**6, **engine)
    trace: list = []
    (_, df), _ = simulate_point(PROFILE, get_mode("diffusion"), reqs, replicas=1, cfg=cfg, router="least-outstanding", seed=0, warmup_frac=0.0,
                                abort_backlog_s=None, drain_s=None, workload_desc="canvas slots", step_trace=trace)
    steps = [(t[4], *t[6]) for t in trace]
    return steps, df


def test_four_admitted_two_canvases_denoise_the_rest_wait_in_running_order():
    """Canvas 256, budget 512, max_num_seqs 4: step 0 prefills all four; requests 0 and 1 run their
    canvas (k=3 denoising steps + commit = steps 1-4); 2 and 3 take the freed slots at step 5."""
    steps, df = _run(4, 3, 1, max_num_seqs=4, max_num_batched_tokens=512)
    assert steps[0] == (4, 0, 0)  # admitted and prefilled together
    assert steps[1:5] == [(0, 2, 0)] * 3 + [(0, 0, 2)]  # two canvases of the 512-token budget
    assert steps[5:9] == [(0, 2, 0)] * 3 + [(0, 0, 2)]  # the waiting two, in running order
    assert len(steps) == 9
    start = df["start_s"].to_numpy()
    assert np.all(start == start[0])  # all four started (prefilled) in the first step
    fin = df["finish_s"].to_numpy()
    assert fin[0] == fin[1] < fin[2] == fin[3]


def test_a_waiting_request_takes_the_first_slot_freed_and_a_running_one_keeps_its_own():
    """Three requests of two canvases each, budget for two: request 2 waits until request 0 or 1
    finishes all its canvases (a running request keeps its slot from canvas to canvas)."""
    steps, _ = _run(3, 2, 2, max_num_seqs=3, max_num_batched_tokens=512)
    assert steps[0] == (3, 0, 0)
    # requests 0 and 1: 2 x (2 denoise + commit) = steps 1-6; request 2: steps 7-12
    assert [s[1] + s[2] for s in steps[1:7]] == [2] * 6
    assert [s[1] + s[2] for s in steps[7:13]] == [1] * 6
    assert len(steps) == 13


def test_the_cap_is_max_num_seqs_where_the_budget_holds_more_canvases():
    """Budget for four canvases, max_num_seqs 2: two run, the others are not admitted (not prefilled) until one finishes."""
    steps, df = _run(3, 2, 1, max_num_seqs=2, max_num_batched_tokens=1024)
    assert steps[0] == (2, 0, 0)
    assert steps[1:4] == [(0, 2, 0), (0, 2, 0), (0, 0, 2)]
    assert steps[4] == (1, 0, 0)  # the third is admitted after the first two finished
    assert df["start_s"].iloc[2] > df["start_s"].iloc[0]


def test_the_budget_left_beside_whole_canvases_runs_a_partial_canvas():
    """Canvas 256, budget 600 (two canvases and 88 tokens), three requests: the third in running
    order denoises an 88-token canvas beside the two whole ones (its steps count toward its k), and
    its commit emits those 88 tokens - a 60-token output finishes with the others, not after them."""
    steps, df = _run(3, 3, 1, outputs=[256, 256, 60], max_num_seqs=3, max_num_batched_tokens=600)
    assert steps[0] == (3, 0, 0)
    assert steps[1:5] == [(0, 3, 0)] * 3 + [(0, 0, 3)]  # the partial canvas counted with its group
    assert len(steps) == 5
    assert (df["finish_s"] == df["finish_s"].iloc[0]).all() and (df["steps"] == 5).all()


def test_a_partial_canvas_goes_on_at_full_width_once_a_whole_slot_frees():
    """Budget 600, outputs 256, 256, 300, 300: 0 and 1 denoise whole canvases, 2 a partial one (88
    tokens), 3 waits. Step 4 commits: 0 and 1 emit 256 tokens and finish, 2 emits 88; from step 5,
    2's next canvas runs at full width in a freed slot (88 + 256 >= 300: its last) and 3 takes the
    other; 3's second canvas runs alone."""
    steps, df = _run(4, 3, 1, outputs=[256, 256, 300, 300], max_num_seqs=4, max_num_batched_tokens=600)
    assert steps[0] == (4, 0, 0)
    assert steps[1:5] == [(0, 3, 0)] * 3 + [(0, 0, 3)]
    assert steps[5:9] == [(0, 2, 0)] * 3 + [(0, 0, 2)]
    assert steps[9:] == [(0, 1, 0)] * 3 + [(0, 0, 1)]
    first, fin = df["first_token_s"].to_numpy(), df["finish_s"].to_numpy()
    assert first[0] == first[1] == first[2] == fin[0] < first[3]  # 2's partial commit is its first output
    assert fin[2] == first[3] < fin[3] and df["steps"].tolist() == [5, 5, 9, 9]


def test_a_partial_canvas_spends_the_budget_prefills_wait():
    """Budget 300 at canvas 256 (44 tokens beside one canvas), prompts 16, 16 and 400: step 0
    prefills the first two and 268 tokens of the third; then request 1's partial canvas takes the
    44 tokens the whole one leaves, and the third prefill gets none (vLLM's walk ends with the budget)
    until request 0 has finished and request 1 runs a whole canvas: 44-token chunks from step 4."""
    steps, df = _run(3, 2, 1, prompts=[16, 16, 400], max_num_seqs=3, max_num_batched_tokens=300)
    assert steps[0] == (3, 0, 0)
    assert steps[1:4] == [(0, 2, 0), (0, 2, 0), (0, 0, 2)]  # no prefill chunk beside the partial canvas
    assert steps[4:7] == [(1, 1, 0), (1, 1, 0), (1, 0, 1)]  # 1's second canvas (44 + 256 tokens) beside 2's chunks
    assert steps[7:] == [(0, 1, 0), (0, 1, 0), (0, 0, 1)]
    assert df["steps"].tolist() == [4, 7, 7]


@pytest.mark.parametrize("async_scheduling", [True, False])
@pytest.mark.parametrize("budget", [512, 600])
def test_coasting_with_waiting_canvases_matches_stepping_one_step_at_a_time(coast_vs_stepping, async_scheduling, budget):
    """The closed-form coast and the lazy replicas give the step-by-step answer when requests wait
    for canvas slots (budget for 2 canvases, and 2 with a partial one of 88 tokens; max_num_seqs 6),
    async scheduling on and off."""
    from simulate.api import run_point

    def run(max_num_seqs=6):
        return run_point(PROFILE, "diffusion", 12.0, replicas=2, n_requests=300, seed=5,
                         engine=EngineSettings(max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, async_scheduling=async_scheduling))

    slots_steps = run(max_num_seqs=2).summary.engine_steps  # before coast_vs_stepping traces every step
    fast, differences = coast_vs_stepping(run)
    assert slots_steps != fast["engine_steps"]  # requests did wait for slots
    assert fast["engine_steps"] > 500 and differences == []
