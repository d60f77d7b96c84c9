"""A fixed fleet: `replicas` (plan sizes it for the peak), or the pool's initial count."""

from __future__ import annotations

from costmodel.errors import UserError


class Static:
    name = "static"
    params = {"replicas": None}
    ticks = False

    def __init__(self, replicas=None):
        if replicas is not None and (int(replicas) != replicas or replicas < 1):
            raise UserError(f"static autoscaler: replicas {replicas!r} must be an integer >= 1", "e.g. static:replicas=4")
        self.replicas = None if replicas is None else int(replicas)

    def initial(self, n: int) -> int:
        return self.replicas or n

    def desired(self, m, now: float):
        return None
