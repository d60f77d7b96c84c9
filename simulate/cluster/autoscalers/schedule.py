"""Replicas by hour of day: `replicas` holds 24 counts (hour 0 first), repeated every day; the
change for an hour is started `lead_s` ahead (default: the provisioning delay, so the replicas
are ready when the hour starts)."""

from __future__ import annotations

from costmodel.errors import UserError


class Schedule:
    name = "schedule"
    params = {"replicas": None, "lead_s": None}
    ticks = True

    def __init__(self, replicas=None, lead_s: float | None = None):
        if not isinstance(replicas, (list, tuple)) or len(replicas) != 24 or any(int(r) != r or r < 0 for r in replicas):
            raise UserError("schedule autoscaler: replicas must be 24 integers >= 0 (hour 0 first)", "e.g. schedule:replicas=2;2;2;...;3 (24 values)")
        self.replicas = tuple(int(r) for r in replicas)
        self.lead_s = lead_s

    def initial(self, n: int) -> int:
        return self.replicas[0]

    def desired(self, m, now: float):
        lead = m.provision_s if self.lead_s is None else self.lead_s
        hour = int(((now + lead) % 86400) // 3600)
        return self.replicas[hour], None
