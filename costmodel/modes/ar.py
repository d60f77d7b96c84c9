"""Autoregressive decoding (Gemma-4-26B-A4B): the prefill's last chunk emits the first token, then
one decode token per sequence per engine step (vLLM's default path)."""

from __future__ import annotations

from costmodel.modes.base import ServingMode


class ArMode(ServingMode):
    name = "ar"
    label = "AR"
    description = "Gemma-4-26B-A4B autoregressive"
    order = 1
    line_style = ("--", "s")
    model_family = "gemma4"
    default_model = "gemma4-26b-a4b"
    pass_kinds = ("prefill", "decode_step")
    prefill_kind = "prefill"
    group_kinds = ("decode_step",)
    sim_cost_rank = 2  # coasts cover its decode steps in closed form: the cheapest per point
    harness = "causal"
    # a recorded engine's account of the mode (base.py)
    recorded_default = True  # a recording with no diffusion scheduler, no speculative tokens, no mode counters

    # ---- measurement (measure/ reads these instead of the mode's name; base.py says what each is) ----
    vllm_served = "tiny-gemma4"
    vllm_model_dir = "ar"
    vllm_campaign_load = dict(qps="2,8,32", requests=24, max_tokens=64, bench_prompts=16, bench_rate=8.0, bench_input_len=32, bench_output_len=48)
    vllm_validation = dict(engine={"max_num_seqs": 16}, low_qps=2.0, requests=48, outputs=(24, 48, 64, 96),
                           concurrency=((4, 24), (8, 32), (16, 48)))
    projection_compare = (("decode_step", 1, 1, 1024), ("decode_step", 32, 1, 1024), ("decode_step", 256, 1, 4096), ("prefill", 1, 1024, 0))
