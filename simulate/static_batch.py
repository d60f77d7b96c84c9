"""Static FCFS batching: the serving policy of the GPU validation server (`costmodel validate`).

The server takes up to `max_batch` waiting requests in arrival order, runs them together as one
transformers `generate` call to completion, then takes the next batch; when nothing waits it idles
until the next arrival. This module simulates exactly that policy with SimPy, pricing every pass
with the profile, so a measured load run and its simulation can be compared request by request.

Pass structure per batch of B requests (prompts padded to the longest, P):
- diffusion: encoder_prefill(B, P); for each canvas c (C = the model's canvas length, 256): an encoder_commit(B, C, P+C(c-1)) before
  every canvas after the first, then max_i k_ic denoise_step(B, 256, P+256(c-1)) passes (a batch's
  denoising loop runs until every row has stopped); all rows run the batch's longest block count.
  A request's first output is the end of its first canvas, its finish the end of its last.
- ar: prefill(B, P) emits the first token; then decode_step(B, 1, P+j) until the batch's longest
  output; a request finishes at its own last token.
- mtp (B = 1, as transformers' assisted generation): prefill, then per iteration k draft_step
  passes and one verify_step over k+1 tokens, emitting 1 + accepted tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
import simpy

from costmodel.errors import UserError
from costmodel.models import get_model
from costmodel.roofline import Segment
from costmodel.schemas.profile import Profile

CANVAS = 256


@dataclass
class BatchRequest:
    """One request of a validation workload: what arrives and how its generation runs."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    steps_per_canvas: list[int] = field(default_factory=list)  # diffusion: k per block
    accepted_per_iteration: list[int] = field(default_factory=list)  # mtp: accepted drafts per verify
    draft_tokens: int = 4  # mtp: k


def _blocks(r: BatchRequest, canvas: int = CANVAS) -> int:
    return max(1, math.ceil(r.output_tokens / canvas))


def batch_timeline(profile: Profile, mode: str, batch: list[BatchRequest]) -> tuple[list[float], list[float], float]:
    """(first-output offsets, finish offsets, batch duration) in seconds from the batch start."""
    B = len(batch)
    P = max(r.prompt_tokens for r in batch)
    ms = lambda *segs: profile.pass_ms(mode, segs)  # noqa: E731
    first, finish = [0.0] * B, [0.0] * B
    if mode == "diffusion":
        C = get_model(profile.mode(mode).model).canvas_length or CANVAS
        t = ms(Segment("encoder_prefill", B, P, 0))
        n_blocks = max(_blocks(r, C) for r in batch)
        for c in range(n_blocks):
            ctx = P + C * c
            if c > 0:
                t += ms(Segment("encoder_commit", B, C, ctx - C))
            steps = max(r.steps_per_canvas[c] if c < len(r.steps_per_canvas) else r.steps_per_canvas[-1] for r in batch)
            t += steps * ms(Segment("denoise_step", B, C, ctx))
            for i, r in enumerate(batch):
                if c == 0:
                    first[i] = t
                if c == _blocks(r, C) - 1:
                    finish[i] = t
        return [x / 1e3 for x in first], [x / 1e3 for x in finish], t / 1e3
    if mode == "ar":
        t = ms(Segment("prefill", B, P, 0))
        first = [t] * B
        longest = max(r.output_tokens for r in batch)
        for i, r in enumerate(batch):
            if r.output_tokens <= 1:
                finish[i] = t
        for j in range(1, longest):
            t += ms(Segment("decode_step", B, 1, P + j - 1))
            for i, r in enumerate(batch):
                if r.output_tokens == j + 1:
                    finish[i] = t
        return [x / 1e3 for x in first], [x / 1e3 for x in finish], t / 1e3
    if mode == "mtp":
        if B != 1:
            raise UserError(f"mtp validation batches hold one request, got {B}", "use --max-batch 1 for mtp")
        r = batch[0]
        t = ms(Segment("prefill", 1, r.prompt_tokens, 0))
        first = [t]
        done, it = 1, 0
        k = r.draft_tokens
        while done < r.output_tokens:
            ctx = r.prompt_tokens + done
            t += k * ms(Segment("draft_step", 1, 1, ctx)) + ms(Segment("verify_step", 1, k + 1, ctx))
            acc = r.accepted_per_iteration[it] if it < len(r.accepted_per_iteration) else 0
            done += 1 + acc
            it += 1
        return [first[0] / 1e3], [t / 1e3], t / 1e3
    raise UserError(f"unknown mode {mode!r}", "use diffusion, ar or mtp")


def simulate_static_batches(profile: Profile, mode: str, requests: list[BatchRequest], max_batch: int) -> pd.DataFrame:
    """Per-request arrival/start/first_token/finish (seconds) under static FCFS batching."""
    if max_batch < 1:
        raise UserError(f"max batch {max_batch} is below 1", "give --max-batch >= 1")
    env = simpy.Environment()
    queue: list[BatchRequest] = []
    rows: list[dict] = []
    wake = {"event": env.event()}

    def arrivals():
        for r in sorted(requests, key=lambda r: r.arrival_s):
            yield env.timeout(max(0.0, r.arrival_s - env.now))
            queue.append(r)
            if not wake["event"].triggered:
                wake["event"].succeed()

    def server():
        served = 0
        while served < len(requests):
            if not queue:
                wake["event"] = env.event()
                yield wake["event"]
                continue
            batch = queue[:max_batch]
            del queue[:max_batch]
            start = env.now
            first, finish, dur = batch_timeline(profile, mode, batch)
            yield env.timeout(dur)
            for r, f, e in zip(batch, first, finish):
                rows.append({"request_id": r.request_id, "arrival_s": r.arrival_s, "start_s": start, "first_token_s": start + f,
                             "finish_s": start + e, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                             "batch_size": len(batch)})
            served += len(batch)

    env.process(arrivals())
    env.process(server())
    env.run()
    return pd.DataFrame(rows).sort_values("arrival_s", kind="stable").reset_index(drop=True)
