"""The fewest replicas that meet an SLO, found by galloping then bisection (not by trying every
count). Assumes meeting the SLO is monotone in replicas: more replicas never hurt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

# evaluate(replicas) -> (meets the SLO, hint: a replica count worth trying next, or None)
Evaluate = Callable[[int], tuple[bool, Optional[int]]]


@dataclass
class SearchResult:
    replicas: int | None  # fewest meeting the SLO, None when even max_replicas does not
    probes: list[tuple[int, bool]] = field(default_factory=list)  # (replicas, met) in evaluation order

    @property
    def evaluations(self) -> int:
        return len(self.probes)


def fewest_replicas(evaluate: Evaluate, lower: int = 1, max_replicas: int = 256, start: int | None = None) -> SearchResult:
    """Smallest r in [lower, max_replicas] with evaluate(r) true. `lower` is a known lower bound
    (e.g. the answer at a smaller QPS) and `start` a first guess (default `lower`).

    Probes the guess; if it misses, gallops up by 1, 1, 2, 4, ... past the last miss (or to a larger
    hint the evaluator gives, such as offered load / served load per replica) until one meets; if
    it meets, gallops down by 1, 1, 2, 4, ... until one misses (or `lower` is reached). Then bisects
    between the last miss and the first meet: O(log distance-from-guess) evaluations. The second
    step of 1 (not 2) because a plan's guesses are mostly within two of the answer: a point's
    verdict costs 2-6 replications, and a probe two away is one more point than needed."""
    if max_replicas < 1:
        raise ValueError("max_replicas must be >= 1")
    lower = max(1, min(lower, max_replicas))
    first = first_probe(lower, max_replicas, start)
    res = SearchResult(None)

    def probe(r: int) -> tuple[bool, int | None]:
        ok, hint = evaluate(r)
        res.probes.append((r, bool(ok)))
        return bool(ok), hint

    miss = lower - 1  # largest count known to miss (lower - 1 is known to, or is 0)
    ok, hint = probe(first)
    if ok:
        hit, step = first, 1
        while hit - step > miss:
            r = hit - step
            if probe(r)[0]:
                hit, step = r, _next_step(step, first - r)
            else:
                miss = r
                break
    else:
        miss, step = first, 1
        while True:
            if miss >= max_replicas:
                return res
            nxt = miss + step
            if hint is not None and hint > nxt:
                nxt = hint
            step = _next_step(step, nxt - first)
            r = min(nxt, max_replicas)
            ok, hint = probe(r)
            if ok:
                hit = r
                break
            miss = r
    while hit - miss > 1:
        mid = (miss + hit) // 2
        if probe(mid)[0]:
            hit = mid
        else:
            miss = mid
    res.replicas = hit
    return res


def first_probe(lower: int, max_replicas: int, start: int | None = None) -> int:
    """The count fewest_replicas evaluates first: the guess `start` (default `lower`) within [lower, max_replicas]."""
    lower = max(1, min(lower, max_replicas))
    return lower if start is None else max(lower, min(start, max_replicas))


def _next_step(step: int, moved: int) -> int:
    """The gallop's next step: 1 again after the first step of 1, then doubling (1, 1, 2, 4, ...)."""
    return 1 if moved <= 1 else step * 2
