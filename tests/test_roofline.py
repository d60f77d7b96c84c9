"""The roofline is the physical limit every measurement is compared with: pin its arithmetic."""

import math

import pytest

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.models import MODELS
from costmodel.precision import get_precision
from costmodel.roofline import Roofline, Segment, crossover_batch, expected_experts_touched

DG = MODELS["diffusiongemma-26b-a4b"]
G4 = MODELS["gemma4-26b-a4b"]
H200 = get_hardware("h200")
BF16 = get_precision("bf16")


def test_parameter_counts_match_published_and_transformers():
    # published 25.2B total / 3.8B active; transformers builds 25.25B for DiffusionGemma
    assert DG.total_params / 1e9 == pytest.approx(25.25, abs=0.01)
    assert G4.total_params / 1e9 == pytest.approx(25.2, abs=0.05)
    assert G4.active_params_per_token / 1e9 == pytest.approx(3.8, abs=0.05)


def test_expected_experts_touched_formula():
    assert expected_experts_touched(128, 8, 1) == pytest.approx(8.0)
    assert expected_experts_touched(128, 8, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert expected_experts_touched(128, 8, 256) == pytest.approx(128, rel=1e-6)
    assert expected_experts_touched(0, 0, 100) == 0


def test_denoise_step_batch1_is_about_50gb_and_10ms_memory_bound():
    r = Roofline(DG, H200, BF16).pass_cost(Segment("denoise_step", 1, 256, 1024))
    d, L, V = 2816, 30, 262144
    # hand count: all 128 experts touched, every non-expert weight once, embedding read twice
    body = DG.shared_body_params - DG.self_conditioning_params
    weights = body + L * r.experts_touched_per_layer * 3 * d * 704 + 2 * V * d + DG.self_conditioning_params
    assert r.weight_bytes == pytest.approx(2 * weights)
    kv_read = 25 * 1024 * (2 * 8 * 256) * 2 + 5 * 1024 * (1 * 2 * 512) * 2
    assert r.kv_read_bytes == pytest.approx(kv_read)
    assert r.kv_write_bytes == 0  # the decoder never writes the cache
    assert r.logits_bytes == pytest.approx(2 * 256 * V * 4)
    assert 50e9 < r.bytes < 53e9
    assert r.memory_ms == pytest.approx(r.bytes / 4.8e12 * 1e3)
    assert 10.4 < r.memory_ms < 11.1 and r.bound == "memory"


def test_denoise_flops_by_hand():
    r = Roofline(DG, H200, BF16).pass_cost(Segment("denoise_step", 1, 256, 1024))
    d, V, T = 2816, 262144, 256
    active_body = DG.shared_body_params - DG.self_conditioning_params + 30 * 8 * 3 * d * 704
    linear = 2 * T * active_body + 2 * T * V * d  # body + lm_head
    selfcond = 2 * T * (V * d + DG.self_conditioning_params)
    # bidirectional canvas: each query sees min(1024+256, 1024) keys in sliding, 1280 in global layers
    attn = T * (25 * 4 * 16 * 256 * 1024 + 5 * 4 * 16 * 512 * 1280)
    assert r.flops == pytest.approx(linear + selfcond + attn)
    assert r.compute_ms == pytest.approx(r.flops / 989.5e12 * 1e3)


def test_encoder_passes_write_kv_and_have_no_logits():
    roof = Roofline(DG, H200, BF16)
    pre = roof.pass_cost(Segment("encoder_prefill", 1, 1024, 0))
    com = roof.pass_cost(Segment("encoder_commit", 2, 256, 1024))
    assert pre.logits_bytes == 0 and com.logits_bytes == 0
    assert pre.kv_write_bytes == pytest.approx(1024 * DG.kv_bytes_per_token(2))
    assert com.kv_write_bytes == pytest.approx(2 * 256 * DG.kv_bytes_per_token(2))
    # causal prefill, no context: query i sees min(i, 1024) keys in sliding layers, i in global
    attn = 25 * 4 * 16 * 256 * (1024 * 1025 / 2) + 5 * 4 * 16 * 512 * (1024 * 1025 / 2)
    body = 2 * 1024 * (DG.shared_body_params - DG.self_conditioning_params + 30 * 8 * 3 * 2816 * 704)
    assert pre.flops == pytest.approx(body + attn)


def test_ar_decode_and_mtp_passes():
    asst = MODELS["gemma4-26b-a4b-assistant"]
    roof = Roofline(G4, H200, BF16, asst)
    dec = roof.pass_cost(Segment("decode_step", 1, 1, 1024))
    assert dec.experts_touched_per_layer == pytest.approx(8)
    assert dec.weight_bytes == pytest.approx(2 * (G4.shared_body_params + 30 * 8 * 3 * 2816 * 704 + 262144 * 2816))
    assert dec.kv_write_bytes == pytest.approx(G4.kv_bytes_per_token(2))
    ver = roof.pass_cost(Segment("verify_step", 1, 5, 1024))
    assert ver.experts_touched_per_layer == pytest.approx(expected_experts_touched(128, 8, 5))
    assert ver.logits_bytes == pytest.approx(2 * 5 * 262144 * 4)
    dr = roof.pass_cost(Segment("draft_step", 1, 1, 1024))
    assert dr.kv_write_bytes == 0  # the assistant reads the target's KV, never writes
    assert dr.weight_bytes == pytest.approx(2 * asst.total_params)
    pre = roof.pass_cost(Segment("prefill", 1, 512, 0))
    assert pre.logits_bytes == pytest.approx(2 * 1 * 262144 * 4)  # logits for the last token only


def test_batch_sweep_turns_compute_bound():
    roof = Roofline(DG, H200, BF16)
    x = crossover_batch(roof, "denoise_step", 256, 1024)
    assert x is not None and 2 <= x <= 8
    assert roof.pass_cost(Segment("denoise_step", x - 1, 256, 1024)).bound == "memory"
    assert roof.pass_cost(Segment("denoise_step", x, 256, 1024)).bound == "compute"


def test_mixed_pass_reads_weights_once():
    roof = Roofline(DG, H200, BF16)
    a = roof.pass_cost(Segment("denoise_step", 2, 256, 1024))
    b = roof.pass_cost((Segment("denoise_step", 1, 256, 1024), Segment("denoise_step", 1, 256, 1024)))
    assert a.bytes == pytest.approx(b.bytes) and a.flops == pytest.approx(b.flops)


def test_precision_scales_weights():
    fp8 = Roofline(DG, H200, get_precision("fp8")).pass_cost(Segment("denoise_step", 1, 256, 1024))
    bf = Roofline(DG, H200, BF16).pass_cost(Segment("denoise_step", 1, 256, 1024))
    assert fp8.weight_bytes == pytest.approx(bf.weight_bytes / 2)
    with pytest.raises(UserError):
        Roofline(DG, H200, get_precision("nvfp4"))  # Hopper has no fp4 tensor rate


@pytest.mark.parametrize("seg", [Segment("denoise_step", 0, 256, 0), Segment("decode_step", 1, 0, 0), Segment("prefill", 1, 1, -1), Segment("bogus", 1, 1, 0)])
def test_impossible_shapes_are_user_errors(seg):
    with pytest.raises(UserError):
        Roofline(DG, H200, BF16, MODELS["gemma4-26b-a4b-assistant"]).pass_cost(seg)


def test_sliding_window_clips_attention():
    roof = Roofline(G4, H200, BF16)
    short = roof.pass_cost(Segment("decode_step", 1, 1, 2000))
    long = roof.pass_cost(Segment("decode_step", 1, 1, 4000))
    # only the 5 global layers grow with context beyond the window
    grow = long.kv_read_bytes - short.kv_read_bytes
    assert grow == pytest.approx(2000 * 5 * 1 * 2 * 512 * 2)
    assert math.isfinite(long.memory_ms)
