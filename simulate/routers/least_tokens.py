"""Fewest outstanding tokens: KV tokens in use or reserved by admitted prefills, plus the prompt
tokens queued behind them, as a share of the replica's KV capacity (so replicas of one pool are
compared by how full their KV cache is and is about to be). Prefers the replica that can admit a
long prompt soonest, where least-outstanding sees a long request and a short one as equal."""

from __future__ import annotations


def load(rep) -> float:
    queued = 0
    for r in rep.waiting:
        queued += r.prefill_len
    return (rep.kv_used + rep.kv_reserved + queued) / rep.kv_cap


def make(replicas: list):
    def route(prompt_tokens: int, output_tokens: int):
        best, bl = replicas[0], load(replicas[0])
        for rep in replicas:
            x = load(rep)
            if x < bl:
                best, bl = rep, x
        return best

    return route
