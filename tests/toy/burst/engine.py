"""The burst mode's engine: AR's replica with two query tokens per sequence, a request's own
progress through its burst kept in `Request.state` (burst steps used so far, across preemptions)."""

from __future__ import annotations

from simulate.engines.ar import ArReplica


class BurstReplica(ArReplica):
    def __init__(self, *a, **kw):
        super().__init__(*a, tokens_per_seq=2, g=kw["plan"].mean_tokens, **kw)

    def _left(self, r) -> int:
        return max(0, self.plan.burst[r.rid] - (r.state or 0))

    def _steps_for(self, r, rem: int) -> int:
        b = self._left(r)
        return -(-rem // 2) if 2 * b >= rem else b + (rem - 2 * b)

    def _tokens_after(self, r, done: int) -> int:
        both = min(done, self._left(r))
        return 2 * both + (done - both)

    def _advance(self, r, done: int) -> None:
        r.steps += done
        r.state = (r.state or 0) + done
