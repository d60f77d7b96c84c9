"""Fewest requests routed and not finished (queued or running): what vLLM's production-stack
router and most load balancers' "least connections" do. Ties go to the lowest position (min keeps
the first of equal keys)."""

from __future__ import annotations

from operator import attrgetter

_OUTSTANDING = attrgetter("outstanding")


def make(replicas: list):
    def route(prompt_tokens: int, output_tokens: int):
        return min(replicas, key=_OUTSTANDING)

    return route
