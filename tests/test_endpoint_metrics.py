"""Server metrics: vLLM exposition text -> counter deltas -> diffusion / MTP statistics."""

import math

import pytest

from measure.endpoint.prometheus import Snapshot, derive, parse_exposition, snapshot_rows


def expo(dg_steps, dg_pos, dg_comm, drafts, dtoks, acc, per_pos, running=2, waiting=1, kv=0.25, other_steps=999.0):
    lines = [
        "# HELP vllm:diffusion_num_denoising_steps_total Diffusion engine steps.",
        "# TYPE vllm:diffusion_num_denoising_steps_total counter",
        f'vllm:diffusion_num_denoising_steps_total{{engine="0",model_name="dg"}} {dg_steps}',
        f'vllm:diffusion_num_denoising_steps_total{{engine="0",model_name="other"}} {other_steps}',
        "# TYPE vllm:diffusion_num_canvas_positions_total counter",
        f'vllm:diffusion_num_canvas_positions_total{{engine="0",model_name="dg"}} {dg_pos}',
        "# TYPE vllm:diffusion_num_committed_tokens_total counter",
        f'vllm:diffusion_num_committed_tokens_total{{engine="0",model_name="dg"}} {dg_comm}',
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="dg"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="dg"}} {dtoks}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="dg"}} {acc}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        *[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="dg",position="{i}"}} {v}' for i, v in enumerate(per_pos)],
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="dg"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{engine="0",model_name="dg"}} {waiting}',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="dg"}} {kv}',
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        'vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="dg"} 3.0',
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="dg"} 4.0',
        'vllm:e2e_request_latency_seconds_count{model_name="dg"} 4.0',
        'vllm:e2e_request_latency_seconds_sum{model_name="dg"} 2.5',
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 10.0',
    ]
    return "\n".join(lines) + "\n"


def snap(text, phase="before", t=0.0):
    return Snapshot(t, phase, True, text=text)


def test_counter_deltas_give_diffusion_and_mtp_statistics():
    before = snap(expo(100, 10 * 256, 2000, 50, 200, 100, [40, 30, 20, 10]))
    # 3 canvases of 256: 24 engine steps (k = 7 denoising + 1 commit each), 700 tokens committed
    # 100 drafts of k=4: accepted per position 80/60/50/30 -> 220 accepted
    after = snap(expo(124, 13 * 256, 2700, 150, 600, 320, [120, 90, 70, 40], running=4, waiting=3, kv=0.75, other_steps=5000), "after", 9.0)
    during = [snap(expo(110, 11 * 256, 2300, 90, 360, 200, [80, 60, 45, 25], running=6, waiting=5, kv=0.5), "during", 4.0)]
    s = derive(before, after, during, model="dg", canvas_length=256)
    d = s.diffusion
    assert d.denoising_steps == 24 and d.canvases == 3
    assert d.steps_per_canvas == pytest.approx(8.0) and d.denoise_steps_per_canvas == pytest.approx(7.0)
    assert d.committed_tokens_per_step == pytest.approx(700 / 24)
    assert d.committed_tokens_per_canvas == pytest.approx(700 / 3)
    p = s.spec_decode
    assert p.num_drafts == 100 and p.num_draft_tokens == 400 and p.num_accepted_tokens == 220
    assert p.acceptance_rate == pytest.approx(220 / 400)
    assert p.mean_acceptance_length == pytest.approx(1 + 220 / 100)
    assert p.draft_tokens_per_step == pytest.approx(4.0)
    assert p.per_position_rates == pytest.approx([0.8, 0.6, 0.5, 0.3])
    # gauges: the during-scrapes only
    assert s.running.mean == 6 and s.waiting.max == 5 and s.kv_cache_usage.mean == pytest.approx(0.5)
    assert s.counter_resets == [] and s.scrapes_ok == 3 and s.scrapes_failed == 0


def test_model_filter_and_unlabelled_servers():
    before, after = snap(expo(0, 0, 0, 0, 0, 0, [0])), snap(expo(10, 512, 500, 0, 0, 0, [0], other_steps=99999), "after")
    assert derive(before, after, [], model="dg").diffusion.denoising_steps == 10
    # a model the server does not label: no series of it, so no statistics rather than another model's
    assert derive(before, after, [], model="nobody").diffusion is None
    plain_b = snap('vllm:spec_decode_num_drafts 10\nvllm:spec_decode_num_accepted_tokens 5\nvllm:spec_decode_num_draft_tokens 20\n')
    plain_a = snap('vllm:spec_decode_num_drafts 30\nvllm:spec_decode_num_accepted_tokens 25\nvllm:spec_decode_num_draft_tokens 60\n', "after")
    sp = derive(plain_b, plain_a, [], model="whatever").spec_decode
    assert sp.mean_acceptance_length == pytest.approx(2.0) and sp.acceptance_rate == pytest.approx(0.5)


def test_counter_reset_is_unknown_not_negative():
    before = snap(expo(500, 256 * 50, 9000, 10, 40, 20, [8, 6, 4, 2]))
    after = snap(expo(20, 256 * 2, 300, 30, 120, 60, [24, 18, 12, 6]), "after")
    s = derive(before, after, [], model="dg")
    assert s.diffusion is None
    assert "vllm:diffusion_num_denoising_steps" in s.counter_resets
    assert s.spec_decode.num_drafts == 20


def test_failed_and_unparseable_scrapes_are_recorded():
    before = snap(expo(0, 0, 0, 0, 0, 0, [0]))
    broken = snap("vllm:num_requests_running{model_name=\"dg\" 3\n", "during", 1.0)
    down = Snapshot(2.0, "during", False, "connect_refused: connection refused")
    after = snap(expo(8, 256, 256, 0, 0, 0, [0]), "after", 3.0)
    s = derive(before, after, [broken, down], model="dg")
    assert s.scrapes_failed == 2 and s.scrapes_ok == 2
    assert not broken.ok and "unparseable" in broken.error
    assert s.diffusion.steps_per_canvas == pytest.approx(8.0)
    rows = snapshot_rows(broken)
    assert len(rows) == 1 and rows[0]["metric"] == "" and math.isnan(rows[0]["value"])


def test_parse_keeps_vllm_samples_without_created_or_foreign_metrics():
    samples, err = parse_exposition(expo(1, 2, 3, 4, 5, 6, [1]))
    assert err is None
    names = {s.name for s in samples}
    assert "vllm:diffusion_num_denoising_steps" in names  # _total stripped
    assert "vllm:e2e_request_latency_seconds_bucket" in names
    assert not any(n.startswith("python_") or n.endswith("_created") for n in names)
