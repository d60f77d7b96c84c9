"""Statistics of the commit-order lens: tie-aware Kendall tau_b, the same-call pair fraction, the
prompt-clustered bootstrap and AUROC.

Why these choices (see shared/reference/diffusiongemma.md, traps 2 and 5):
- many positions share one accept-call, and within a call the order is undefined, so the rank
  correlation must treat those pairs as ties: Kendall tau_b (scipy.stats.kendalltau, variant "b");
- seeds of one prompt are not independent, so confidence intervals resample *prompts* and keep a
  prompt's seeds together (cluster bootstrap, percentile interval);
- AUROC is the Mann-Whitney U statistic scaled to [0, 1] (ties count one half).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

CI_LEVEL = 0.95


def tau_b(first_call: np.ndarray, position: np.ndarray) -> float:
    """Kendall tau_b between first-acceptance call and position (ties in either are ties).

    NaN when it is undefined: fewer than two positions, or either variable constant (e.g. every
    position first accepted in one call), where tau_b's denominator is zero."""
    x = np.asarray(first_call)
    y = np.asarray(position)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(stats.kendalltau(x, y, variant="b").statistic)


def tied_sequential_tau_b(length: int, block: int) -> float:
    """Closed form of tau_b for a left-to-right order committed `block` positions at a time
    (call = position // block, tied within a block) over `length` positions.

    Every between-block pair is concordant and every within-block pair is tied in the call only,
    so tau_b = (n0 - T) / sqrt((n0 - T) * n0) = sqrt(1 - T / n0), with n0 = length choose 2 and
    T = sum over blocks of (block size choose 2). This is what the block-sequential control must
    score; it is below 1 only because of the ties."""
    if length < 2:
        return math.nan
    sizes = [block] * (length // block) + ([length % block] if length % block else [])
    n0 = length * (length - 1) / 2
    tied = sum(s * (s - 1) / 2 for s in sizes)
    if tied >= n0:
        return math.nan
    return math.sqrt(1.0 - tied / n0)


def same_call_pair_fraction(first_call: np.ndarray) -> float:
    """Fraction of position pairs whose first acceptance happened in the same accept-call:
    sum over calls of (n_call choose 2) / (n choose 2). 0 = one position per call, 1 = all in one."""
    x = np.asarray(first_call)
    n = x.size
    if n < 2:
        return math.nan
    _, counts = np.unique(x, return_counts=True)
    return float((counts * (counts - 1)).sum() / (n * (n - 1)))


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + 0.5 P(tie), from scipy's Mann-Whitney U.

    NaN when either class is empty."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    if pos.size == 0 or neg.size == 0:
        return math.nan
    u = stats.mannwhitneyu(pos, neg, alternative="two-sided").statistic  # U of the positives
    return float(u / (pos.size * neg.size))


# -- prompt-clustered bootstrap ---------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterBootstrap:
    """Bootstrap resampling weights for one set of clusters (prompts).

    `weights[b, p]` is how many times cluster p was drawn in resample b (multinomial, n_clusters
    draws): a resample keeps every observation of a drawn prompt (all its seeds and canvases)
    together, and an observation's weight is its cluster's count."""

    weights: np.ndarray  # (resamples, clusters), int

    @classmethod
    def draw(cls, n_clusters: int, resamples: int, rng: np.random.Generator) -> "ClusterBootstrap":
        if n_clusters < 1:
            return cls(np.zeros((resamples, 0), dtype=np.int64))
        return cls(rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=resamples))

    @property
    def resamples(self) -> int:
        return self.weights.shape[0]

    def for_observations(self, cluster_of: np.ndarray) -> np.ndarray:
        """(resamples, observations) weights for observations labelled by cluster index."""
        return self.weights[:, np.asarray(cluster_of, dtype=np.int64)]

    def mean_ci(self, values: np.ndarray, cluster_of: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
        """Percentile CI of the mean of `values` (NaNs dropped) over prompt resamples."""
        v = np.asarray(values, dtype=float)
        c = np.asarray(cluster_of, dtype=np.int64)
        ok = ~np.isnan(v)
        if not ok.any() or self.resamples == 0:
            return (math.nan, math.nan)
        w = self.for_observations(c[ok]).astype(float)
        total = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (w @ v[ok]) / total
        return _percentile_ci(means[total > 0], level)

    def auroc_ci(self, scores: np.ndarray, labels: np.ndarray, cluster_of: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float, int]:
        """Percentile CI of AUROC over prompt resamples; returns (lo, hi, resamples used).

        Resamples that draw only one class are dropped (their AUROC is undefined); the count used
        is returned so a report can say how many were."""
        return weighted_auroc_ci(scores, labels, self.for_observations(cluster_of), level)


def weighted_auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC for each row of integer observation weights (the rank formula with weights).

    With weights w, AUROC = sum over score levels g of W+_g (W-_below_g + W-_g / 2) / (W+ W-): the
    same Mann-Whitney count as `auroc` with each observation repeated w times. Vectorised over
    resamples; rows without both classes give NaN."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    levels, level_of = np.unique(s, return_inverse=True)
    onehot = np.zeros((s.size, levels.size))
    onehot[np.arange(s.size), level_of] = 1.0
    wpos = (w * y) @ onehot  # (R, levels)
    wneg = (w * ~y) @ onehot
    below = np.cumsum(wneg, axis=1) - wneg
    num = (wpos * (below + 0.5 * wneg)).sum(axis=1)
    den = wpos.sum(axis=1) * wneg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def weighted_auroc_ci(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float, int]:
    """Percentile CI of AUROC over rows of resample weights; (lo, hi, resamples with both classes)."""
    aucs = weighted_auroc(scores, labels, weights)
    aucs = aucs[~np.isnan(aucs)]
    lo, hi = _percentile_ci(aucs, level)
    return lo, hi, int(aucs.size)


def _percentile_ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    if samples.size == 0:
        return (math.nan, math.nan)
    a = (1 - level) / 2
    lo, hi = np.quantile(samples, [a, 1 - a])
    return float(lo), float(hi)
