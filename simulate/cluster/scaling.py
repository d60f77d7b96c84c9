"""The HPA-like machinery around an autoscaling policy (autoscalers/): when it looks, how much it
may change, how long a new replica takes to serve.

Defaults are Kubernetes' HorizontalPodAutoscaler's (metric sync period 15 s, tolerance 0.1,
scale-down stabilisation window 300 s). A new replica serves after its provisioning delay:
`startup_s` (container start and vLLM engine initialisation: CUDA graph capture, compilation;
ASSUMED 60 s, not measured here) plus its weights (costmodel/memory.py's weights term for the
GPU, mode and precision) read at `load_gb_per_s` (ASSUMED 2 GB/s: weights streamed from a local
NVMe copy or a network store; the GPU's own memory bandwidth is never the limit). Both are
settings; GPU time is billed from the moment a replica is requested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.memory import EngineSettings, replica_memory
from costmodel.modes import ServingMode
from costmodel.schemas.profile import Profile

DEFAULT_SCRAPE_S = 15.0
DEFAULT_TOLERANCE = 0.1
DEFAULT_SCALE_DOWN_WINDOW_S = 300.0
DEFAULT_STARTUP_S = 60.0
DEFAULT_LOAD_GB_PER_S = 2.0
DEFAULT_COMPRESS = 4.0  # a day simulated this many times faster: its curve and these clocks (simulate/plan/day_hours.py compressed_scaling)


@dataclass(frozen=True)
class Scaling:
    """Bounds and timing of one pool's autoscaling (module docstring)."""

    min_replicas: int = 1
    max_replicas: int = 64
    initial_replicas: int | None = None  # None: min_replicas (a static policy: its own count)
    scrape_interval_s: float = DEFAULT_SCRAPE_S
    tolerance: float = DEFAULT_TOLERANCE
    scale_down_window_s: float = DEFAULT_SCALE_DOWN_WINDOW_S
    startup_s: float = DEFAULT_STARTUP_S
    load_gb_per_s: float = DEFAULT_LOAD_GB_PER_S

    def check(self, where: str) -> "Scaling":
        if not (isinstance(self.min_replicas, int) and self.min_replicas >= 1):
            raise UserError(f"{where}: min replicas {self.min_replicas!r} must be an integer >= 1", "scale-to-zero is not modelled: give min >= 1")
        if not (isinstance(self.max_replicas, int) and self.max_replicas >= self.min_replicas):
            raise UserError(f"{where}: min replicas {self.min_replicas} exceed max replicas {self.max_replicas}", "give min <= max")
        if self.initial_replicas is not None and not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise UserError(f"{where}: initial replicas {self.initial_replicas} outside [{self.min_replicas}, {self.max_replicas}]", "give min <= initial <= max")
        for name in ("scrape_interval_s", "load_gb_per_s"):
            if not getattr(self, name) > 0:
                raise UserError(f"{where}: {name} {getattr(self, name)!r} must be > 0", "give a positive number")
        for name in ("tolerance", "scale_down_window_s", "startup_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise UserError(f"{where}: {name} {v!r} must be >= 0", "give a non-negative number")
        return self


def weights_bytes(profile: Profile, mode: ServingMode) -> int:
    """Bytes of weights one replica loads (the target's and any assistant's, at the profile's precision)."""
    r = profile.resolved()
    m = profile.mode(mode.name)
    mem = replica_memory(r.spec, mode, r.precision, EngineSettings(), model=m.model, assistant=m.assistant)
    return int(sum(t.bytes for t in mem.terms if t.kind == "weights"))


def provision_s(profile: Profile, mode: ServingMode, scaling: Scaling) -> float:
    """Seconds from requesting a replica to its first step: start-up plus loading its weights."""
    return scaling.startup_s + weights_bytes(profile, mode) / (scaling.load_gb_per_s * 1e9)
