"""The registry of routers inside a pool: which ready replica an arriving request joins. A router
is a factory `make(ready) -> route(prompt_tokens, output_tokens) -> replica`, where `ready` is the
pool's list of replicas taking requests (mutated in place as the autoscaler adds and drains
replicas). Routers read the replicas' state as of their last booked step (simulate/scheduler.py's
`outstanding`, `waiting`, `kv_used`, `kv_reserved`); ties go to the lowest position. One module per
router, one `register` line below. Choosing the pool (by request class) is the fleet's
(simulate/cluster/classes.py)."""

from __future__ import annotations

from typing import Callable

from costmodel.errors import UserError

_REGISTRY: dict[str, Callable] = {}


def register(name: str, make: Callable) -> None:
    if name in _REGISTRY:
        raise ValueError(f"router {name!r} is registered twice")
    _REGISTRY[name] = make


def unregister(name: str) -> None:
    """Remove a router (tests that register one clean up with this)."""
    _REGISTRY.pop(name, None)


def router_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def make_router(name: str, ready: list) -> Callable:
    try:
        return _REGISTRY[name](ready)
    except KeyError:
        raise UserError(f"unknown router {name!r}", f"use one of {', '.join(_REGISTRY)}") from None


# ---- the registered routers: one line each ---------------------------------------------------
from simulate.cluster.routers import least_outstanding, least_tokens, round_robin  # noqa: E402

register("least-outstanding", least_outstanding.make)
register("round-robin", round_robin.make)
register("least-tokens", least_tokens.make)
