"""Burst decoding (a toy, tests/test_recipe_mode.py): a Gemma-4 decoder whose every step runs one
`burst_step` pass of two query tokens per sequence; the second token is kept for the first `burst`
steps of a request (drawn per request from the profile part `burst_steps`), so a request emits 2
tokens per step, then 1. Its pass kind is an entry of PASS_KINDS; its engine simulate/engines/burst.py."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ProfilePart, ServingMode
from costmodel.records import Distribution, Provenance
from costmodel.seeding import rng_for

STREAM_BURST = 91


class BurstPart(ProfilePart):
    """`burst_steps`: the distribution of steps per request that keep both tokens."""

    key = "burst_steps"
    label = "burst"
    fix = "add burst_steps: {dist: {values, probs}, provenance}"

    def load(self, value):
        if not value:
            return None
        return {"dist": Distribution(**value["dist"]), "provenance": Provenance(**value["provenance"])}

    def validate(self, value, where: str) -> None:
        if value:
            value["dist"].validate(f"{where}: burst_steps")
            value["provenance"].validate(f"{where}: burst_steps")

    def provenance_kinds(self, value) -> list[str]:
        return [value["provenance"].kind] if value else []

    def provenance_record(self, value) -> dict | None:
        return {**asdict(value["provenance"]), "mean_steps": value["dist"].mean} if value else None

    def provenance_items(self, record: dict) -> list[tuple[str, str]]:
        return [(record["kind"], "burst steps")]

    def prior(self) -> dict:
        return {"dist": Distribution([0.0, 100.0], [0.5, 0.5]), "provenance": Provenance("published", "a toy: half the requests burst 100 steps")}


BURST = BurstPart()


class BurstDraws(ModeDraws):
    """burst[rid]: the steps of request rid that keep both tokens."""

    def __init__(self, profile, reqs, seed: int):
        part = profile.burst_steps
        if not part:
            raise UserError(f"profile {profile.profile_id} has no burst_steps", BURST.fix)
        super().__init__(group_tokens=(2,), kv_need_tokens=reqs.prompt_tokens + reqs.output_tokens + 1)
        self.burst = part["dist"].sample(rng_for(seed, STREAM_BURST), len(reqs.output_tokens)).astype(np.int64).tolist()
        self.mean_tokens = 1.0 + min(1.0, part["dist"].mean / max(1.0, float(np.mean(reqs.output_tokens))))


class BurstMode(ServingMode):
    name = "burst"
    label = "Burst"
    description = "Gemma-4 keeping two tokens per step for a drawn number of steps (a toy)"
    order = 4
    line_style = (":", "v")
    model_family = "gemma4"
    default_model = "gemma4-26b-a4b"
    pass_kinds = ("prefill", "burst_step")
    prefill_kind = "prefill"
    group_kinds = ("burst_step",)
    parts = (BURST,)

    def kv_step_slots(self, k: int, canvas: int) -> int:
        return 2

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        return 2

    def draw(self, profile, reqs, seed: int) -> BurstDraws:
        return BurstDraws(profile, reqs, seed)
