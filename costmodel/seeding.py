"""Seeded random streams: one independent numpy Generator per (seed, stream id), so every draw of a
run (arrivals, lengths, regimes, each mode's per-request draws) is fixed by the seed alone and does
not depend on which other draws were made, or in what order."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations; the functions that compute import numpy (a CLI's --help does not load it)
    import numpy as np


def rng_for(seed: int, stream: int) -> np.random.Generator:
    import numpy as np
    return np.random.default_rng([int(seed), int(stream)])
