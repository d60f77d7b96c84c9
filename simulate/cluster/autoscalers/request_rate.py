"""Requests per second per replica (KEDA on a Prometheus request rate, or Knative's RPS target):
desired = ceil(arrival rate over the last `window_s` / target). Plan's autoscaled fleet uses it
with the peak fleet's load per replica as the target (simulate/plan/day.py)."""

from __future__ import annotations

import math
from collections import deque

from costmodel.errors import UserError


class RequestRate:
    name = "request-rate"
    params = {"target": None, "window_s": 60.0}
    ticks = True

    def __init__(self, target: float | None = None, window_s: float = 60.0):
        if target is None or not target > 0:
            raise UserError(f"request-rate: target {target!r} must be a positive request rate per replica", "e.g. request-rate:target=3.5")
        if not window_s > 0:
            raise UserError(f"request-rate: window_s {window_s!r} must be > 0", "e.g. window_s=60")
        self.target, self.window_s = float(target), float(window_s)
        self.seen: deque = deque()  # (time, arrivals so far) at each scrape

    def initial(self, n: int) -> int:
        return n

    def desired(self, m, now: float):
        self.seen.append((now, m.arrived))
        while len(self.seen) > 2 and self.seen[1][0] <= now - self.window_s:
            self.seen.popleft()
        t0, a0 = self.seen[0]
        if now <= t0:
            return None
        rate = (m.arrived - a0) / (now - t0)
        return math.ceil(rate / self.target - 1e-9), rate / (max(m.ready, 1) * self.target)
