"""Public API of the simulator (what `costmodel simulate` and `costmodel plan` call).

    from simulate.api import run_point, simulate_grid
    res = run_point(profile, "diffusion", 4.0, replicas=2, n_requests=2000, seed=0)
    res.summary.stable, res.summary.ttft_ms["p95"], res.requests  # PointSummary, DataFrame

Deterministic: the same arguments give identical results (the seed fixes arrivals, lengths,
regimes and every per-mode draw; nothing depends on wall time or process). The workload drawn for
a seed is the same for every mode and replica count, so modes and replica counts are compared on
the same requests. Cheap to call repeatedly: step prices are cached per profile object in the
process, and a grossly overloaded point stops early (abort_backlog_s).
"""

from simulate.batch import SimulateConfig, SimulateOutcome, run_simulation, write_outcome
from simulate.point import PointResult, check_mode, resolve_engine, resolve_workload, run_point
from simulate.parallel import run_points, simulate_grid

__all__ = ["PointResult", "SimulateConfig", "SimulateOutcome", "check_mode", "resolve_engine", "resolve_workload", "run_point",
           "run_points", "run_simulation", "simulate_grid", "write_outcome"]
