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
