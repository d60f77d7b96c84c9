"""GPU power from utilisation: the linear server power model (Fan, Weber and Barroso, "Power
provisioning for a warehouse-sized computer", ISCA 2007: P(u) = P_idle + (P_busy - P_idle) u),
with P_busy the GPU's board power (costmodel/data/hardware.json) and P_idle a share of it.
IDLE_POWER_FRAC is ASSUMED (not measured here): Hopper and Blackwell boards idle at roughly a tenth of their
board power with the weights resident (nvidia-smi readings commonly reported, 60-80 W of
700 W on an H100 SXM). A replica that is provisioning (loading weights) is billed at idle power."""

from __future__ import annotations

IDLE_POWER_FRAC = 0.10


def power_w(board_power_w: float, utilisation: float, idle_frac: float = IDLE_POWER_FRAC) -> float:
    """Mean power of a GPU at this utilisation (simulate/cluster/pool.py defines it)."""
    idle = idle_frac * board_power_w
    return idle + (board_power_w - idle) * min(max(utilisation, 0.0), 1.0)
