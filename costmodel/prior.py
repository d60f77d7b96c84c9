"""Published priors, shipped as data with their citation and every assumption written down:
commit statistics per regime from the commit-order study, and vLLM's synthetic MTP acceptance.

Commit prior (arXiv 2606.14620, "Neither Parallel Nor Sequential", table in
shared/reference/diffusiongemma.md). The study publishes tokens per accept-call per regime and a
3-17 range of accept-calls per generation that tracks content length; it does not publish content
lengths. Assumptions (ours, stated):
- content length per regime is lognormal (sigma 0.35) around a median chosen for the task
  (`MEDIAN_CONTENT_TOKENS`), clipped to [8, 256] (max_new_tokens 256: one canvas);
- accept-calls (denoising steps) per canvas = ceil(content length / tokens-per-call), clipped to the
  published 3-17 range;
- re-noise events: 4,524 over 600 generations = 7.54 per generation, the same for every regime
  (the study gives no per-regime split);
- commit entropy: midpoint of the published 0.002-0.012 nats.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import lognorm

from costmodel.schemas.profile import CommitStats, Distribution, MtpAcceptance, Provenance

CITATION = 'arXiv 2606.14620, "Neither Parallel Nor Sequential" (commit-order study of DiffusionGemma-26B-A4B), table 1'

# regime -> (task, tokens per accept-call, median content tokens (ASSUMED))
REGIMES = {
    "R1": ("math word problems (GSM8K)", 25.5, 200),
    "R2": ("code, function completion (HumanEval)", 23.0, 180),
    "R3": ("code, short programs (MBPP)", 19.8, 150),
    "R4": ("short factual recall", 5.8, 30),
    "R5": ("open-ended instructions", 12.6, 190),
    "R6": ("constrained JSON", 8.5, 100),
}
MEDIAN_CONTENT_TOKENS = {r: v[2] for r, v in REGIMES.items()}
STEP_RANGE = (3, 17)
RENOISE_PER_GENERATION = 4524 / 600
COMMIT_ENTROPY_NATS = (0.002 + 0.012) / 2
CONTENT_SIGMA = 0.35


def _lognormal_lengths(median: float, sigma: float, lo: int = 8, hi: int = 256) -> Distribution:
    """Discretise a lognormal onto integer lengths lo..hi (probability mass by CDF differences)."""
    edges = np.arange(lo, hi + 2) - 0.5
    cdf = lognorm.cdf(edges, s=sigma, scale=median)
    mass = np.diff(cdf)
    mass[0] += cdf[0]
    mass[-1] += 1 - cdf[-1]
    keep = mass > 1e-6
    vals = np.arange(lo, hi + 1)[keep]
    probs = mass[keep] / mass[keep].sum()
    return Distribution(vals.astype(float).tolist(), probs.tolist())


def published_commit_prior() -> dict[str, CommitStats]:
    out = {}
    for regime, (task, tpc, median) in REGIMES.items():
        lengths = _lognormal_lengths(median, CONTENT_SIGMA)
        steps: dict[float, float] = {}
        for L, p in zip(lengths.values, lengths.probs):
            k = float(min(max(math.ceil(L / tpc), STEP_RANGE[0]), STEP_RANGE[1]))
            steps[k] = steps.get(k, 0.0) + p
        ks = sorted(steps)
        out[regime] = CommitStats(
            regime=regime,
            steps_per_canvas=Distribution(ks, [steps[k] for k in ks]),
            tokens_per_call=tpc,
            content_length=lengths,
            renoise_per_generation=RENOISE_PER_GENERATION,
            commit_entropy_nats=COMMIT_ENTROPY_NATS,
            provenance=Provenance(
                "published", CITATION,
                notes=(f"tokens/call {tpc} published; content length median {median} tokens ASSUMED (lognormal sigma {CONTENT_SIGMA}); "
                       f"steps = ceil(length / tokens-per-call) clipped to the published {STEP_RANGE[0]}-{STEP_RANGE[1]}"),
            ),
            description=task,
        )
    return out


def vllm_synthetic_mtp_acceptance(k: int = 4, rate: float = 0.8) -> MtpAcceptance:
    return MtpAcceptance(
        num_speculative_tokens=k,
        per_position=[rate] * k,
        provenance=Provenance(
            "published", "vLLM benchmarks' synthetic per-token acceptance rate (0.8) with num_speculative_tokens 4",
            notes="a stated default, not measured on Gemma-4-26B-A4B; replace with a real checkpoint run or a live deployment's spec_decode metrics",
        ),
    )
