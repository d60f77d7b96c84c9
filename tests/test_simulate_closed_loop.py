"""Closed-loop clients (`costmodel simulate --concurrency N`, vllm bench serve --max-concurrency N) and
vllm bench's request-rate / burstiness pair: at most N requests in flight, the next sent when one
finishes; latencies from the send; throughput saturates as N grows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from costmodel.errors import UserError
from costmodel.shipped import resolve_profile
from simulate.api import run_point


@pytest.fixture(scope="module")
def h200():
    return resolve_profile(None, "h200")


def in_flight_max(df: pd.DataFrame) -> int:
    """The most requests sent and not finished at any instant (a finish before a send at one instant)."""
    t = np.concatenate([df.arrival_s.to_numpy(), df.finish_s.to_numpy()])
    step = np.concatenate([np.ones(len(df)), -np.ones(len(df))])
    order = np.lexsort((step, t))
    return int(np.cumsum(step[order]).max())


def test_the_issue_command_runs_and_says_the_load_was_closed_loop(cli):
    code, out, err = cli("simulate", "--concurrency", "16", "--mode", "diffusion", "--hardware", "h200", "--jobs", "1")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "clients" in out and "closed loop" in flat and "vllm bench serve --max-concurrency" in flat
    assert "QPS inf: no rate limit" in flat


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
def test_at_most_n_requests_are_in_flight_and_each_finish_sends_the_next(h200, mode):
    for n in (1, 6):
        res = run_point(h200, mode, None, concurrency=n, n_requests=120, seed=1)
        df, s = res.requests, res.summary
        assert df.finished.all() and s.stable and s.concurrency == n and np.isinf(s.qps)
        assert in_flight_max(df) == n
        assert (df.arrival_s.to_numpy()[:n] == 0).all()  # the first N are sent at once
        # every later send is a finish: the N clients never idle while requests remain
        sends = np.sort(df.arrival_s.to_numpy()[n:])
        finishes = np.sort(df.finish_s.to_numpy())[: len(sends)]
        assert np.allclose(sends, finishes)
        assert "closed loop" in s.workload and "no rate limit" in s.workload
    assert 0.98 < s.mean_in_system / n <= 1.0 + 1e-9 and s.gpu_busy_frac <= 1.0 + 1e-9


def test_throughput_grows_with_clients_then_saturates(h200):
    tok_s = {n: run_point(h200, "ar", None, concurrency=n, n_requests=max(200, 12 * n), seed=0).summary.output_tokens_per_s
             for n in (1, 4, 16, 64)}
    assert tok_s[1] < tok_s[4] < tok_s[16] < tok_s[64]
    # DiffusionGemma runs at most max_num_seqs canvases (vLLM's cap of 8): clients beyond it only queue.
    # Each reply spends the profile's front-end latency outside the engine, so 8 clients leave the
    # engine short of 8 canvases part of the time; twice the cap keeps it full. (Nearly full already at 8:
    # a client's next request sent during an eager prefill step's launch joins the very next step, so 8 and
    # 16 clients agree within 1%.)
    dg = {n: run_point(h200, "diffusion", None, concurrency=n, n_requests=400, seed=0).summary for n in (2, 8, 16, 64)}
    assert dg[16].max_num_seqs == 8 and dg[16].binding_limit == "max_num_seqs"
    assert dg[2].output_tokens_per_s < dg[8].output_tokens_per_s <= 1.01 * dg[16].output_tokens_per_s
    assert dg[64].output_tokens_per_s == pytest.approx(dg[16].output_tokens_per_s, rel=0.05)
    assert dg[64].ttft_ms["p50"] > 3 * dg[16].ttft_ms["p50"]  # the extra clients wait in the engine's queue


def test_a_rate_and_a_cap_together_are_vllm_bench_semantics(h200):
    """--qps with --concurrency: sent at the drawn arrival time, or when a slot frees if all N are
    busy then; a rate far below capacity is never held back (the open loop's results)."""
    open_loop = run_point(h200, "ar", 2.0, n_requests=300, seed=3, burstiness=0.5).requests
    capped = run_point(h200, "ar", 2.0, n_requests=300, seed=3, burstiness=0.5, concurrency=2).requests
    assert (capped.arrival_s.to_numpy() >= open_loop.arrival_s.to_numpy() - 1e-12).all()
    assert (capped.arrival_s.to_numpy() > open_loop.arrival_s.to_numpy() + 1e-9).any()
    assert in_flight_max(capped) == 2 < in_flight_max(open_loop)
    roomy = run_point(h200, "ar", 0.2, n_requests=100, seed=3, concurrency=1000)
    plain = run_point(h200, "ar", 0.2, n_requests=100, seed=3)
    pd.testing.assert_series_equal(roomy.requests.e2e_ms, plain.requests.e2e_ms)


def test_burstiness_is_the_gamma_shape_of_the_gaps(h200):
    poisson = run_point(h200, "ar", 1.0, n_requests=50, seed=2).requests.arrival_s
    assert run_point(h200, "ar", 1.0, n_requests=50, seed=2, burstiness=1.0).requests.arrival_s.equals(poisson)
    gaps = np.diff(run_point(h200, "ar", 50.0, n_requests=4000, seed=2, burstiness=0.25, abort_backlog_s=None,
                             warmup_frac=0.0).requests.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)  # cv = 1 / sqrt(shape)


def test_closed_loop_outputs_name_their_clients(cli, tmp_path):
    code, out, err = cli("simulate", "--concurrency", "2,8", "--mode", "ar", "--requests", "60", "-o", str(tmp_path / "s"), "--jobs", "1")
    assert code == 0, err
    summary = pd.read_csv(tmp_path / "s" / "summary.csv")
    assert summary.concurrency.tolist() == [2, 8] and summary.workload.str.startswith("closed loop").all()
    assert (tmp_path / "s" / "requests_ar_qpsinf_c8_r1.parquet").exists()


@pytest.mark.parametrize("args,match", [
    (["--concurrency", "0"], "--concurrency 0 is below 1"),
    (["--concurrency", "2.5"], "not a whole number of clients"),
    (["--concurrency", "many"], "not a whole number of clients"),
    (["--concurrency", "1000000"], "above 100,000 clients"),
    (["--concurrency", "4,4"], "twice"),
    (["--concurrency", "4", "--duration", "60"], "not a duration"),
    (["--concurrency", "4", "--burstiness", "0.5"], "no --qps"),
    (["--qps", "1", "--burstiness", "0"], "--burstiness"),
    (["--qps", "1", "--burstiness", "bursty"], "not a number"),
])
def test_bad_closed_loop_input_is_one_line(cli, args, match):
    code, out, err = cli("simulate", "--mode", "ar", *args)
    assert code == 2, (out, err)
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_api_refuses_a_bad_client_count(h200):
    for bad in (0, 1.5, True, -3):
        with pytest.raises(UserError, match="concurrency"):
            run_point(h200, "ar", None, concurrency=bad, n_requests=10)


# closed loops with no rate and with a rate and a cap, async scheduling on and off (tests/test_native.py runs the open-loop cases)
NATIVE_CASES = [("diffusion", None, {}, 12), ("mtp", 30.0, {"async_scheduling": False}, 16), ("ar", None, {}, 48)]
NATIVE_RUN = """
import dataclasses, json, sys
from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.engine import EngineConfig
import costmodel.native
out = {"compiled": costmodel.native.active(), "runs": []}
for mode, qps, eng, clients in json.loads(sys.argv[1]):
    s = run_point(resolve_profile(None, "h200"), mode, qps, replicas=2, n_requests=400, seed=5, engine=EngineConfig(**eng), concurrency=clients).summary
    out["runs"].append({k: v for k, v in dataclasses.asdict(s).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
print(json.dumps(out))
"""


def _native_run(pure: bool) -> dict:
    import json
    import os
    import subprocess
    import sys

    from costmodel import native

    env = {**os.environ, native.PURE_ENV: "1"} if pure else {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    res = subprocess.run([sys.executable, "-c", NATIVE_RUN, json.dumps(NATIVE_CASES)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _compiled() -> tuple:
    from costmodel.native import compiled_modules

    return compiled_modules()


@pytest.mark.skipif(not _compiled()[0], reason="the simulator is not compiled here: python -m simulate.build_native")
def test_compiled_and_pure_closed_loops_give_the_same_numbers():
    import math

    compiled, pure = _native_run(pure=False), _native_run(pure=True)
    assert compiled["compiled"] and not pure["compiled"]
    for case, c, p in zip(NATIVE_CASES, compiled["runs"], pure["runs"]):
        assert c["concurrency"] == case[3] and c["engine_steps"] > 500, case
        same = [k for k in c if c[k] == p[k] or (math.isnan(c[k]) and math.isnan(p[k])) or math.isclose(c[k], p[k], rel_tol=1e-9, abs_tol=1e-12)]
        assert sorted(set(c) - set(same)) == [], case
