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


def make(ready: list):
    def route(prompt: int, out: int):
        best, bl = ready[0], load(ready[0])
        for rep in ready:
            x = load(rep)
            if x < bl:
                best, bl = rep, x
        return best

    return route
