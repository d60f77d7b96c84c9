"""Routers: which replica an arriving request joins. Deterministic (ties go to the lowest index)."""

from __future__ import annotations

from operator import attrgetter

from costmodel.errors import UserError

ROUTERS = ("least-outstanding", "round-robin")


def make_router(name: str, replicas: list):
    """-> route(): the replica the next arrival joins (the caller enqueues it there)."""
    if name not in ROUTERS:
        raise UserError(f"unknown router {name!r}", f"use one of {', '.join(ROUTERS)}")
    if len(replicas) == 1:
        only = replicas[0]

        def route_one():
            return only

        return route_one
    if name == "round-robin":
        n = len(replicas)
        state = [0]

        def route_rr():
            rep = replicas[state[0]]
            state[0] = (state[0] + 1) % n
            return rep

        return route_rr

    def route_lo():
        return fewest_outstanding(replicas)

    return route_lo


def fewest_outstanding(replicas: list):
    """The replica with the fewest requests routed and not yet finished (queued or running); ties
    go to the lowest index (min keeps the first of equal keys). The pools' least-outstanding router
    (simulate/cluster/routers) picks with it too."""
    return min(replicas, key=_OUTSTANDING)


_OUTSTANDING = attrgetter("outstanding")
