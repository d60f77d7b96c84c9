"""A toy fourth serving mode, the whole of it: "pair" decoding emits two tokens per sequence per
engine step from one 2-token decode pass of the AR model (think of a drafter that is always right
and costs nothing). It exists to show that a mode is a mode (costmodel.modes) and its engine
(simulate.engines): the test registers each with one line and runs simulate, plan and both
reports on it."""

from __future__ import annotations

from costmodel.modes import ModeDraws, ServingMode
from simulate.engines.ar import ArReplica


class PairReplica(ArReplica):
    def __init__(self, *a, **kw):  # 2 query tokens (and KV slots) and 2 emitted tokens per sequence per step
        super().__init__(*a, tokens_per_seq=2, g=2, **kw)

    def _steps_for(self, r, rem: int) -> int:
        return -(-rem // 2)

    def _tokens_after(self, r, done: int) -> int:
        return 2 * done


class PairMode(ServingMode):
    name = "pair"
    label = "Pair"
    description = "Gemma-4 emitting two tokens per decode step (a toy)"
    order = 3
    line_style = ("-.", "x")
    model_family = "gemma4"
    default_model = "gemma4-26b-a4b"
    pass_kinds = ("prefill", "decode_step")
    prefill_kind = "prefill"
    group_kinds = ("decode_step",)

    def kv_step_slots(self, k: int, canvas: int) -> int:
        return 2

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        return 2

    def draw(self, profile, reqs, seed: int) -> ModeDraws:
        # the last step may write one slot past the output
        return ModeDraws(group_tokens=(2,), kv_need_tokens=reqs.prompt_tokens + reqs.output_tokens + 1)
