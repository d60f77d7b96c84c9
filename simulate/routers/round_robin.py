"""Round robin over the replicas, in their order (a pool's: the order they became ready)."""

from __future__ import annotations


def make(replicas: list):
    state = [0]

    def route(prompt_tokens: int, output_tokens: int):
        i = state[0] % len(replicas)
        state[0] = i + 1
        return replicas[i]

    return route
