"""Fewest requests routed and not finished (queued or running): what vLLM's production-stack
router and most load balancers' "least connections" do."""

from __future__ import annotations


def make(ready: list):
    def route(prompt: int, out: int):
        best = ready[0]
        bo = best.outstanding
        for rep in ready:
            if rep.outstanding < bo:
                best, bo = rep, rep.outstanding
        return best

    return route
