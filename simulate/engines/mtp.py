"""Multi-token prediction on a replica (Gemma-4 + its assistant, costmodel/modes/mtp.py): each engine
step runs the drafts and one verify pass of k+1 tokens per sequence, emitting 1 + accepted drafts;
the mode's draws (MtpDraws) say how many steps a request's tokens take."""

from __future__ import annotations

from simulate.engines.ar import ArReplica


class MtpReplica(ArReplica):
    """Like AR, but a step emits 1 + accepted drafts per sequence. Contexts and KV grow by the mean
    acceptance length per step in the counters (exact per-sequence counts would need a per-step
    loop); each request's own emitted tokens and step count are exact."""

    def __init__(self, *a, **kw):
        plan = kw["plan"]
        super().__init__(*a, tokens_per_seq=plan.k + 1, g=plan.mean_tokens, **kw)
        self.sum_ctx = 0.0
        # every request's first decode phase, searched for all requests at once by the draws (MtpDraws._first_decode):
        # read here, in compiled code, instead of a call into the draws per request
        need, steps = getattr(plan, "first_need", None), getattr(plan, "first_steps", None)
        ok = isinstance(need, list) and isinstance(steps, list) and len(need) == len(steps)
        self.first_need = need if ok else []
        self.first_steps = steps if ok else []
        if self.pc is not None:  # the drafter needs its last prefix block recomputed (simulate/kvcache.py)
            self.pc.drop_last = True

    def _steps_for(self, r, rem: int) -> int:
        rid = r.rid
        if r.mpos == 0 and r.cum is None and rid < len(self.first_steps):  # MtpDraws.steps_for's first case, read in place
            n = self.first_steps[rid]
            if n >= 0 and rem == self.first_need[rid]:
                return n
        return self.plan.steps_for(r, rem)

    def _tokens_after(self, r, done: int) -> int:
        return self.plan.tokens_after(r, done)

    def _advance(self, r, done: int) -> None:
        r.steps += done
        r.mpos += done
