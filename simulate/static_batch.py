"""Static FCFS batching: the serving policy of the GPU validation server (`costmodel validate`).

The server takes up to `max_batch` waiting requests in arrival order, runs them together as one
transformers `generate` call to completion, then takes the next batch; when nothing waits it idles
until the next arrival. This module simulates exactly that policy with SimPy, pricing every pass
with the profile, so a measured load run and its simulation can be compared request by request.

The pass structure of one batch run to completion is its mode's (`ServingMode.static_batch_ms` in
costmodel/modes: AR's prefill then one decode pass per token; diffusion's prefill, then per canvas a
commit and its slowest row's denoising steps; MTP's one-request batches of draft and verify passes).
"""

from __future__ import annotations

import pandas as pd
import simpy

from costmodel.errors import UserError
from costmodel.modes import ServingMode
from costmodel.modes.diffusion import CANVAS_DEFAULT as CANVAS  # noqa: F401 (simulate/validate/loads.py reads it here)
from costmodel.schemas.batch_request import BatchRequest
from costmodel.schemas.profile import Profile
from costmodel.stepcost import pass_cost


def batch_timeline(profile: Profile, mode: ServingMode, batch: list[BatchRequest]) -> tuple[list[float], list[float], float]:
    """(first-output offsets, finish offsets, batch duration) in seconds from the batch start."""
    first, finish, total_ms = mode.static_batch_ms(pass_cost(profile, mode.name), batch)
    return [x / 1e3 for x in first], [x / 1e3 for x in finish], total_ms / 1e3


def simulate_static_batches(profile: Profile, mode: ServingMode, requests: list[BatchRequest], max_batch: int) -> pd.DataFrame:
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
