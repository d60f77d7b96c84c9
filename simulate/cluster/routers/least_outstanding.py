"""Fewest requests routed and not finished (queued or running): what vLLM's production-stack
router and most load balancers' "least connections" do."""

from __future__ import annotations

from simulate.router import fewest_outstanding


def make(ready: list):
    def route(prompt: int, out: int):
        return fewest_outstanding(ready)

    return route
