"""The registry of autoscaling policies. A policy says how many replicas a pool wants
(`desired(metrics, now)`, called at every metric scrape); the HPA-like machinery around it
(simulate/cluster/scaling.py: scrape interval, tolerance, min/max, scale-down stabilisation,
provisioning delay) is shared. A policy class has `name`, `params` (its keyword arguments and
their defaults), `ticks` (False: it never changes the fleet, so no scrape runs) and `initial(n)`
(replicas at the start, given the pool's initial setting). One module per policy, one
`register` line below."""

from __future__ import annotations

from costmodel.errors import UserError

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> None:
    if cls.name in _REGISTRY:
        raise ValueError(f"autoscaler {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls


def unregister(name: str) -> None:
    """Remove a policy (tests that register one clean up with this)."""
    _REGISTRY.pop(name, None)


def autoscaler_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def make_autoscaler(name: str, **params):
    """An autoscaling policy by name, its parameters checked (one-line errors)."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UserError(f"unknown autoscaler {name!r}", f"use one of {', '.join(_REGISTRY)}")
    bad = set(params) - set(cls.params)
    if bad:
        raise UserError(f"autoscaler {name} has no parameter(s) {', '.join(sorted(bad))}", f"it takes {', '.join(cls.params) or 'none'}")
    return cls(**params)


def parse_autoscaler(text: str):
    """"queue-depth:target=8" / "static:replicas=4" / "schedule:replicas=2;2;...;3" -> a policy."""
    name, _, body = text.strip().partition(":")
    params = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise UserError(f"autoscaler {text!r}: {part!r} is not KEY=VALUE", "e.g. queue-depth:target=8")
        try:
            params[k.strip()] = [int(x) for x in v.split(";")] if ";" in v else float(v)
        except ValueError:
            raise UserError(f"autoscaler {text!r}: {k.strip()}={v!r} is not a number", "e.g. target-utilisation:target=0.6") from None
    return make_autoscaler(name, **params)


# ---- the registered policies: one line each ---------------------------------------------------
from simulate.cluster.autoscalers import queue_depth, request_rate, schedule, static, target_utilisation  # noqa: E402

register(static.Static)
register(target_utilisation.TargetUtilisation)
register(queue_depth.QueueDepth)
register(schedule.Schedule)
register(request_rate.RequestRate)
