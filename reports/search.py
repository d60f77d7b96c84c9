"""The fewest replicas that meet an SLO, found by galloping then bisection (not by trying every
count). Assumes meeting the SLO is monotone in replicas: more replicas never hurt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

# evaluate(replicas) -> (meets the SLO, hint: a replica count worth trying next, or None)
Evaluate = Callable[[int], "tuple[bool, Optional[int]]"]


@dataclass
class SearchResult:
    replicas: int | None  # fewest meeting the SLO, None when even max_replicas does not
    probes: list[tuple[int, bool]] = field(default_factory=list)  # (replicas, met) in evaluation order

    @property
    def evaluations(self) -> int:
        return len(self.probes)


def fewest_replicas(evaluate: Evaluate, lower: int = 1, max_replicas: int = 256) -> SearchResult:
    """Smallest r in [lower, max_replicas] with evaluate(r) true. `lower` is a known lower bound
    (e.g. the answer at a smaller QPS). Probes lower, then lower+1, +2, +4, ... (or a larger hint the
    evaluator gives, such as offered load / measured capacity per replica) until one meets, then
    bisects between the last miss and the first meet: O(log r) evaluations."""
    if max_replicas < 1:
        raise ValueError("max_replicas must be >= 1")
    lower = max(1, min(lower, max_replicas))
    res = SearchResult(None)
    seen: dict[int, bool] = {}

    def probe(r: int) -> tuple[bool, int | None]:
        ok, hint = evaluate(r)
        seen[r] = bool(ok)
        res.probes.append((r, bool(ok)))
        return bool(ok), hint

    miss, r, step = lower - 1, lower, 1
    while True:
        ok, hint = probe(r)
        if ok:
            hit = r
            break
        miss = r
        if r >= max_replicas:
            return res
        nxt = miss + step
        if hint is not None and hint > nxt:
            nxt = hint
        step *= 2
        r = min(nxt, max_replicas)
    while hit - miss > 1:
        mid = (miss + hit) // 2
        ok, _ = probe(mid) if mid not in seen else (seen[mid], None)
        if ok:
            hit = mid
        else:
            miss = mid
    res.replicas = hit
    return res
