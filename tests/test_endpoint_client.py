"""The streaming load client against a real loopback HTTP server (tests/servers/openai_server.py,
fast backend): schedule, token accounting, latency definitions, concurrency cap, and failures as
data (5xx, dropped/truncated streams, malformed and error events, slow and stalled servers,
refused connections)."""

import asyncio
import math

import numpy as np
import pytest

from measure.endpoint.client import LoadClient, LoadConfig, PlannedRequest, PromptItem, schedule_s
from measure.endpoint.failures import REASONS
from servers.helpers import ServerProcess, free_port


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--backend", "fast", "--step-ms", "1") as s:
        yield s


def run_load(url, prompts, model="fast-ar", arrivals=None, **cfg):
    arrivals = arrivals if arrivals is not None else [i * 0.005 for i in range(len(prompts))]
    planned = [PlannedRequest(f"r{i:04d}", t, PromptItem(f"p{i}", prompt=p)) for i, (t, p) in enumerate(zip(arrivals, prompts))]
    c = LoadConfig(api_base=url + "/v1", model=model, **{"max_tokens": 12, "timeout_s": 10.0, **cfg})
    return asyncio.run(LoadClient(c).run(planned))


def test_schedule_is_seeded_and_bounded():
    a = schedule_s(100.0, "poisson", 500, None, seed=3)
    assert np.array_equal(a, schedule_s(100.0, "poisson", 500, None, seed=3))
    assert a[0] == 0 and np.all(np.diff(a) >= 0) and len(a) == 500
    assert 3.5 < a[-1] < 6.5  # ~5 s at 100 req/s
    c = schedule_s(4.0, "constant", None, 2.0, seed=0)
    assert c.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert len(schedule_s(50.0, "poisson", 10_000, 1.0, seed=1)) < 100  # duration ends it first
    assert schedule_s(math.inf, "poisson", 5, None, 0).tolist() == [0.0] * 5


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_tokens_and_latency_definitions(server, api):
    res = run_load(server.url, ["hello there"] * 4, model="fast-ar", api=api)
    assert len(res.requests) == 4  # the checks below run on every request, never on none
    for r in res.requests:
        assert r.status == "ok", r.error_detail
        assert r.tokens_source == "usage" and r.output_tokens == 12 and r.prompt_tokens == 3
        cs = res.chunks[r.request_id]
        assert len(cs) == 12 and sum(n for _, n in cs) == 12  # one token per event; the role delta is no token
        assert r.start_s >= r.dispatch_s >= r.arrival_s
        assert r.first_token_s == cs[0][0] and r.start_s < r.first_token_s <= cs[-1][0] <= r.finish_s
        assert r.ttft_ms == pytest.approx((r.first_token_s - r.start_s) * 1e3)
        assert r.e2e_ms == pytest.approx((r.finish_s - r.start_s) * 1e3)
        assert r.tpot_ms == pytest.approx((r.e2e_ms - r.ttft_ms) / 11)
        assert r.itl_mean_ms == pytest.approx((cs[-1][0] - cs[0][0]) / 11 * 1e3)
        assert r.finish_reason == "length" and r.n_chunks == 12


def test_bursts_counted_by_usage_or_as_pieces(server):
    res = run_load(server.url, ["a b"] * 3, model="fast-diffusion", max_tokens=70)
    assert len(res.requests) == 3
    for r in res.requests:
        assert [n for _, n in res.chunks[r.request_id]] == [32, 32, 6]  # canvas bursts of 32
    res = run_load(server.url, ["a b"] * 3, model="fast-diffusion", max_tokens=70, continuous_usage=False)
    assert len(res.requests) == 3
    for r in res.requests:
        assert r.tokens_source == "pieces"
        assert [n for _, n in res.chunks[r.request_id]] == [1, 1, 1]  # one per event without usage
        assert r.output_tokens == 70  # from the final usage chunk


def test_concurrency_cap_holds_and_waits_are_recorded(server):
    res = run_load(server.url, ["x"] * 12, model="fast-ar", arrivals=[0.0] * 12, concurrency=3, max_tokens=20)
    assert all(r.status == "ok" for r in res.requests)
    edges = sorted([(r.start_s, 1) for r in res.requests] + [(r.finish_s, -1) for r in res.requests], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in edges:
        level += d
        peak = max(peak, level)
    assert peak <= 3
    assert max(r.wait_ms for r in res.requests) > 5  # later requests waited for a slot


def test_requests_leave_on_schedule(server):
    t = schedule_s(100.0, "poisson", 150, None, seed=5).tolist()
    res = run_load(server.url, ["on time"] * 150, model="fast-diffusion", arrivals=t, max_tokens=40)
    late = np.array([r.lateness_ms for r in res.requests])
    # every request released at or after its scheduled time (not all at once); how late on this machine is a
    # speed figure, benchmarks/bench_client.py's (a bound here failed on a busy 2-core machine: 121 ms against 100)
    assert np.all(np.isfinite(late)) and np.all(late >= 0)
    assert all(r.status == "ok" for r in res.requests)


EXPECTED = {
    "#fault=http500": ("http_error", 500),
    "#fault=http429": ("http_error", 429),
    "#fault=drop": ("stream_dropped", None),
    "#fault=close": ("stream_dropped", None),
    "#fault=truncate": ("stream_truncated", None),
    "#fault=malformed": ("malformed_event", None),
    "#fault=error_event": ("server_error_event", None),
    "#fault=slow:5": ("timeout", None),
    "#fault=stall": ("timeout", None),
    "#fault=not_sse": ("not_event_stream", None),
}


def test_every_failure_is_accounted_for(server):
    prompts = [f"request {i} {fault}" for i, fault in enumerate(EXPECTED)] + ["a healthy request"] * 3
    res = run_load(server.url, prompts, model="fast-diffusion", max_tokens=100, timeout_s=1.5)
    assert len(res.requests) == len(prompts)
    by_prompt = {r.prompt_id: r for r in res.requests}
    for i, (fault, (reason, status)) in enumerate(EXPECTED.items()):
        r = by_prompt[f"p{i}"]
        assert r.status == "error" and r.failure_reason == reason, (fault, r.failure_reason, r.error_detail)
        assert r.failure_reason in REASONS and r.error_detail
        assert math.isfinite(r.finish_s)
        if status:
            assert r.http_status == status
    # partial streams keep what arrived
    assert by_prompt["p2"].n_chunks == 2 and by_prompt["p8"].n_chunks == 1 and math.isfinite(by_prompt["p8"].ttft_ms)
    healthy = [r for r in res.requests if "healthy" in prompts[int(r.prompt_id[1:])]]
    assert all(r.status == "ok" and r.output_tokens == 100 for r in healthy)


def test_connection_refused_is_data():
    port = free_port()
    res = run_load(f"http://127.0.0.1:{port}", ["x"] * 3, timeout_s=3.0)
    assert [r.failure_reason for r in res.requests] == ["connect_refused"] * 3
    assert all(r.status == "error" and math.isnan(r.ttft_ms) for r in res.requests)


def test_lean_pool_reuses_keep_alive_connections(server):
    import httpx

    from measure.endpoint.transport import LeanTransport

    async def go():
        tr = LeanTransport()
        async with httpx.AsyncClient(transport=tr, trust_env=False, timeout=10) as http:
            for _ in range(20):
                body = {"model": "fast-ar", "stream": True, "max_tokens": 3, "prompt": "x"}
                async with http.stream("POST", server.url + "/v1/completions", json=body) as r:
                    assert r.status_code == 200
                    async for _ in r.aiter_bytes():
                        pass
            n_sequential = tr.pool.connections
            await asyncio.gather(*[http.get(server.url + "/health") for _ in range(5)])
            return n_sequential, tr.pool.connections

    sequential, concurrent = asyncio.run(go())
    assert sequential == 1  # one connection served all 20 streams one after another
    assert 1 <= concurrent <= 5
