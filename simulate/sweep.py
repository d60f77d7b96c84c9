"""Points in parallel processes (concurrent.futures). Each point is independent and deterministic,
so running them in parallel changes nothing but the wall time; results come back in input order."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from costmodel.errors import UserError
from simulate.point import PointResult, check_mode, run_point


def _one(profile, mode, qps, kwargs):
    return run_point(profile, mode, qps, **kwargs)


def default_processes(n_points: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(n_points, cores))


def run_points(profile, points: list[tuple[str, float | None]], *, processes: int | None = None, progress=None, **kwargs):
    """[(mode, qps), ...] -> [PointResult, ...] in the same order."""
    n = len(points)
    procs = default_processes(n) if processes is None else int(processes)
    if procs < 1:
        raise UserError(f"processes {processes!r} must be >= 1", "e.g. --jobs 4")
    results = [None] * n
    if procs == 1 or n == 1:
        for i, (mode, qps) in enumerate(points):
            results[i] = _one(profile, mode, qps, kwargs)
            if progress:
                progress(i + 1, n, results[i])
        return results
    with ProcessPoolExecutor(max_workers=min(procs, n)) as pool:
        futs = {pool.submit(_one, profile, mode, qps, kwargs): i for i, (mode, qps) in enumerate(points)}
        done = 0
        for fut in as_completed(futs):
            i = futs[fut]
            results[i] = fut.result()  # a worker's UserError re-raises here with its message
            done += 1
            if progress:
                progress(done, n, results[i])
    return results


def sweep(profile, modes, qps_list, *, processes: int | None = None, progress=None, **kwargs) -> list[PointResult]:
    """run_point for every (mode, qps) (mode-major order), QPS points in parallel processes.
    `progress(done, total, result)` is called as points finish; kwargs go to run_point."""
    modes = [modes] if isinstance(modes, str) else list(modes)
    qps_list = [qps_list] if qps_list is None or isinstance(qps_list, (int, float)) else list(qps_list)
    for m in modes:
        check_mode(profile, m)
    points = [(m, q) for m in modes for q in qps_list]
    return run_points(profile, points, processes=processes, progress=progress, **kwargs)
