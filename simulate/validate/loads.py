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
from costmodel.options import parse_floats
from costmodel.schemas.profile import Profile
from costmodel.schemas.validation_loads import ModeLoads
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


def parse_rates(rates: str) -> list[float] | None:
    """--rates: requests per second (a comma list), or None for 'auto'."""
    if rates == "auto":
        return None
    given = parse_floats(rates, "rates")
    bad = [r for r in given if not (r > 0 and math.isfinite(r))]
    if bad:
        raise UserError(f"--rates {bad} are not positive", "give positive requests per second, or 'auto'")
    return given


@dataclass(frozen=True)
class ValidationWorkload:
    """The workload of a GPU validation (`costmodel validate`): each mode's loads (`mode_loads`: each
    rate's seeded Poisson requests, at the rates given or those the profile's capacity suggests), which
    the load run (measure/validate/gpu.py) serves."""

    profile: Profile
    prompt_tokens: tuple[int, int] = (128, 1024)
    max_output_tokens: int = 256
    draft_tokens: int = 4

    def requests(self, mode: ServingMode, rate_rps: float, n_requests: int, seed: int) -> list[BatchRequest]:
        return poisson_workload(self.profile, mode, rate_rps, n_requests, seed, self.prompt_tokens, self.max_output_tokens,
                                draft_tokens=self.draft_tokens)

    def auto_rates(self, mode: ServingMode, probe: list[BatchRequest], max_batch: int) -> list[float]:
        return auto_rates(self.profile, mode, probe, max_batch)

    def mode_loads(self, mode: ServingMode, rates: list[float] | None, n_requests: int, max_batch: int, seed: int,
                   warmup_requests: int) -> ModeLoads:
        """One mode's loads: a warm-up of another seed (at least one full batch), then each rate's requests
        (rates None: 25%, 55% and 85% of the capacity the profile predicts for a full batch)."""
        batch = mode.static_batch_requests or max_batch
        rate_list = rates if rates is not None else self.auto_rates(mode, self.requests(mode, 1.0, n_requests, seed), batch)
        warm = self.requests(mode, 1.0, max(batch, warmup_requests), seed + 10_000)
        workload = {"prompt_tokens": list(self.prompt_tokens), "max_output_tokens": self.max_output_tokens, "draft_tokens": self.draft_tokens,
                    "seed": seed, "profile": self.profile.profile_id, "n_requests": n_requests}
        return ModeLoads(mode.name, batch, self.draft_tokens, warm, [(r, self.requests(mode, r, n_requests, seed)) for r in rate_list], workload)

