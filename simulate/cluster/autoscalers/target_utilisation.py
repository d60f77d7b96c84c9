"""Kubernetes HPA on a utilisation metric: desired = ceil(ready x utilisation / target), the
utilisation being the share of the replicas' step capacity used over the last scrape interval
(simulate/cluster/pool.py: busy time x running sequences against the engine's running cap)."""

from __future__ import annotations

import math

from costmodel.errors import UserError


class TargetUtilisation:
    name = "target-utilisation"
    params = {"target": 0.6}
    ticks = True

    def __init__(self, target: float = 0.6):
        if not 0 < target <= 1:
            raise UserError(f"target-utilisation: target {target!r} must be in (0, 1]", "e.g. target-utilisation:target=0.6")
        self.target = float(target)

    def initial(self, n: int) -> int:
        return n

    def desired(self, m, now: float):
        if m.ready == 0:
            return None
        return math.ceil(m.ready * m.utilisation / self.target - 1e-9), m.utilisation / self.target
