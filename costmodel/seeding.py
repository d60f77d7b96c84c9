"""Seeded random streams: one independent numpy Generator per (seed, stream id), so every draw of a
run (arrivals, lengths, regimes, each mode's per-request draws) is fixed by the seed alone and does
not depend on which other draws were made, or in what order."""

from __future__ import annotations

import numpy as np


def rng_for(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(stream)])
