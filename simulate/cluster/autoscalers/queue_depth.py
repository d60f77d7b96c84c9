"""Kubernetes HPA (or Knative's concurrency autoscaler) on requests in flight: desired =
ceil(outstanding requests / target per replica), outstanding = queued + running on the pool's
ready and draining replicas at the scrape."""

from __future__ import annotations

import math

from costmodel.errors import UserError


class QueueDepth:
    name = "queue-depth"
    params = {"target": None}
    ticks = True

    def __init__(self, target: float | None = None):
        if target is None or not target > 0:
            raise UserError(f"queue-depth: target {target!r} must be a positive number of requests per replica", "e.g. queue-depth:target=8")
        self.target = float(target)

    def initial(self, n: int) -> int:
        return n

    def desired(self, m, now: float):
        ratio = m.outstanding / (max(m.ready, 1) * self.target)
        return math.ceil(m.outstanding / self.target - 1e-9), ratio
