"""Round robin over the ready replicas, in the order they became ready."""

from __future__ import annotations


def make(ready: list):
    state = [0]

    def route(prompt: int, out: int):
        i = state[0] % len(ready)
        state[0] = i + 1
        return ready[i]

    return route
