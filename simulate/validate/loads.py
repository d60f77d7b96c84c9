"""The validation workload: Poisson arrivals at a rate, prompt/output lengths and, for diffusion,
the denoising steps of every canvas drawn from the profile's commit statistics. The same records
drive the GPU load run (as a replayed commit schedule) and its simulation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.errors import UserError
from costmodel.modes import ServingMode
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.schemas.profile import Profile
from simulate.static_batch import CANVAS, BatchRequest
from simulate.validate.runner import auto_rates


def poisson_workload(profile: Profile, mode: ServingMode, rate_rps: float, n_requests: int, seed: int,
                     prompt_tokens: tuple[int, int] = (128, 1024), max_output_tokens: int = 256,
                     regimes: list[str] | None = None, draft_tokens: int = 4) -> list[BatchRequest]:
    """`n_requests` requests arriving by a Poisson process; output lengths follow the regimes'
    content-length distributions (capped at `max_output_tokens`), steps per canvas their k."""
    if rate_rps <= 0 or not math.isfinite(rate_rps):
        raise UserError(f"rate {rate_rps} is not a positive number", "give --rates as positive requests per second")
    if n_requests < 2:
        raise UserError(f"{n_requests} requests per rate are too few to score", "give --requests >= 2")
    regimes = regimes or sorted(profile.regimes)
    unknown = [r for r in regimes if r not in profile.regimes]
    if unknown:
        raise UserError(f"regimes {unknown} are not in profile {profile.profile_id}", f"use some of {', '.join(profile.regimes)}")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, n_requests))
    arrivals -= arrivals[0]  # the first request arrives when the run starts
    out = []
    for i, t in enumerate(arrivals):
        cs = profile.regimes[regimes[i % len(regimes)]]
        n_out = int(min(max_output_tokens, max(1, cs.content_length.sample(rng))))
        blocks = max(1, math.ceil(n_out / CANVAS))
        steps = [int(k) for k in cs.steps_per_canvas.sample(rng, blocks)] if COMMIT_STATS in mode.parts else []
        out.append(BatchRequest(
            request_id=f"q{i:05d}", arrival_s=float(t), prompt_tokens=int(rng.integers(prompt_tokens[0], prompt_tokens[1] + 1)),
            output_tokens=n_out, steps_per_canvas=steps, draft_tokens=draft_tokens,
        ))
    return out


@dataclass(frozen=True)
class ValidationWorkload:
    """The workload of a GPU validation (`costmodel validate`) as the load run (measure/validate/gpu.py)
    asks for it: each rate's seeded Poisson requests, and the rates the profile's capacity suggests."""

    profile: Profile
    prompt_tokens: tuple[int, int] = (128, 1024)
    max_output_tokens: int = 256
    draft_tokens: int = 4

    def requests(self, mode: ServingMode, rate_rps: float, n_requests: int, seed: int) -> list[BatchRequest]:
        return poisson_workload(self.profile, mode, rate_rps, n_requests, seed, self.prompt_tokens, self.max_output_tokens,
                                draft_tokens=self.draft_tokens)

    def auto_rates(self, mode: ServingMode, probe: list[BatchRequest], max_batch: int) -> list[float]:
        return auto_rates(self.profile, mode, probe, max_batch)
