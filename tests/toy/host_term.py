"""A toy step term, the whole of it: an engine's host work as a constant number of milliseconds per
engine step, read from the profile's `engine` part (`toy_host_ms`; 0 where a profile lacks it).
With its registration line (`costmodel.stepcost.register_term(HostTerm())`) every simulated step
pays it."""

from __future__ import annotations


class HostTerm:
    name = "toy_host"

    def step_ms(self, cost, prefill, groups, draws) -> float:
        return float(cost.profile.engine.get("toy_host_ms", 0.0))
