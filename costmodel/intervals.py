"""Student-t intervals of a mean, the one rule behind every interval an answer prints: a plan point's
over its replications (simulate/plan/settle.py), an hour's over its batch means
(simulate/cluster/outcome.py), the crossover's over seeds (costmodel/costing/crossover.py)."""

from __future__ import annotations

import math
import statistics
from functools import lru_cache

CONFIDENCE = 0.95


@lru_cache(maxsize=256)  # a plan asks for the same few (df, looks) thousands of times; scipy's ufunc call dominates a scalar
def t_quantile(df: int, looks: int = 1) -> float:
    """The two-sided quantile of Student's t on `df` degrees of freedom for a CONFIDENCE interval
    looked at up to `looks` times (Bonferroni: each look at 1 - (1 - CONFIDENCE) / looks, so the
    verdict a sequence of looks settles errs less than 1 - CONFIDENCE) (scipy)."""
    from scipy.special import stdtrit  # imported where intervals are computed (scipy.special, not the heavier scipy.stats)

    return float(stdtrit(df, 1 - (1 - CONFIDENCE) / (2 * max(1, looks))))


def t_interval(values, looks: int = 1) -> tuple[float, float]:
    """(low, high) of the CONFIDENCE t-interval of the mean of `values` (at least two)."""
    vals = [float(v) for v in values]
    mean = statistics.fmean(vals)
    half = t_quantile(len(vals) - 1, looks) * statistics.stdev(vals) / math.sqrt(len(vals))
    return mean - half, mean + half
