"""numpy's percentiles (method "linear", np.percentile's default) of a finite sample, computed on a sorted
copy: the same values to the bit (tests/test_percentiles.py), without the import np.percentile makes on
its first call (it partitions at np.unique's indices, and np.unique loads numpy.ma: 8-14 ms of every
simulate's start-up, issue 51).

    linear_percentiles(np.array([1.0, 2.0, 4.0]), (50, 90))  # array([2. , 3.6])
"""

from __future__ import annotations

import numpy as np


def linear_percentiles(x: np.ndarray, percentiles) -> np.ndarray:
    """np.percentile(x, percentiles) for a non-empty 1-D array of finite numbers."""
    s = np.sort(x)
    q = np.true_divide(np.asarray(percentiles, dtype=float), 100)
    at = (len(s) - 1) * q  # numpy's virtual index for "linear": (n - 1) q
    below = np.floor(at)
    gamma = at - below
    lo = below.astype(np.intp)
    hi = np.minimum(lo + 1, len(s) - 1)
    a, b = s[lo], s[hi]
    step = b - a
    # numpy's _lerp: from below where gamma < 0.5, from above where it is not (its rounding, kept)
    return np.where(gamma >= 0.5, b - step * (1 - gamma), a + step * gamma)
