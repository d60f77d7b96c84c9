"""Routers: which replica an arriving request joins. Deterministic (ties go to the lowest index)."""

from __future__ import annotations

from costmodel.errors import UserError

ROUTERS = ("least-outstanding", "round-robin")


def make_router(name: str, replicas: list):
    """-> route(request): enqueue the request on the chosen replica and return that replica."""
    if name not in ROUTERS:
        raise UserError(f"unknown router {name!r}", f"use one of {', '.join(ROUTERS)}")
    if len(replicas) == 1:
        only = replicas[0]

        def route_one(r):
            only.enqueue(r)
            return only

        return route_one
    if name == "round-robin":
        n = len(replicas)
        state = [0]

        def route_rr(r):
            rep = replicas[state[0]]
            state[0] = (state[0] + 1) % n
            rep.enqueue(r)
            return rep

        return route_rr

    def route_lo(r):
        """Fewest requests routed and not yet finished (queued or running)."""
        best = replicas[0]
        bo = best.outstanding
        for rep in replicas:
            if rep.outstanding < bo:
                best, bo = rep, rep.outstanding
        best.enqueue(r)
        return best

    return route_lo
