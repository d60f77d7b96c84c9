"""The registry of routers: which replica an arriving request joins, the one family `simulate`
(a point's replicas), `plan` (its points) and the day's pools (simulate/cluster/pool.py) share. A
router is a factory `make(replicas) -> route(prompt_tokens, output_tokens) -> replica`, where
`replicas` is the list it picks from (a point's fixed replicas, or a pool's ready ones, mutated in
place as the autoscaler adds and drains replicas). Routers read the replicas' state as of their
last booked step (simulate/scheduler.py's `outstanding`, `waiting`, `kv_used`, `kv_reserved`);
ties go to the lowest position. A new router is one module here and one `register` line below.
Choosing the pool (by request class) is the fleet's (simulate/cluster/classes.py)."""

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


def check_router(name: str) -> str:
    """`name` if it is a registered router; else the one line naming the choices."""
    if name not in _REGISTRY:
        raise UserError(f"unknown router {name!r}", f"use one of {', '.join(_REGISTRY)}")
    return name


def make_router(name: str, replicas: list) -> Callable:
    return _REGISTRY[check_router(name)](replicas)


# ---- the registered routers: one line each (the first is the default) --------------------------
from simulate.routers import least_outstanding, least_tokens, round_robin  # noqa: E402

register("least-outstanding", least_outstanding.make)
register("round-robin", round_robin.make)
register("least-tokens", least_tokens.make)

DEFAULT_ROUTER = router_names()[0]
