"""Sweep throughput: one 2,000-point sweep (kind simulate, short points) run from scratch on 1 and
on 2 local workers; prints points per second each, the per-point CPU cost, and the bytes sent to
a worker per point and back (what sizing a cluster needs: docs/sweeps.md).

    .venv/bin/python benchmarks/bench_sweep.py [--points 2000] [--workers 1,2] [--requests 100]

Points: 3 modes x QPS x max_num_seqs x seeds on the shipped H200 profile, `--requests` arrivals
each. Workers=1 is the serial in-process path (no Dask); more is a Dask LocalCluster, whose
start-up is included in the wall time.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulate.parallel import Workers  # noqa: E402
from simulate.sweep.run import run_sweep, simulate_job  # noqa: E402
from simulate.sweep.spec import parse_spec  # noqa: E402


def spec_of(points: int, requests: int) -> dict:
    """3 modes x 4 QPS x 4 max_num_seqs = 48 points per seed; seeds make up the count."""
    seeds = -(-points // 48)
    return {"kind": "simulate", "base": {"hardware": "h200", "n_requests": requests},
            "grid": {"mode": ["diffusion", "ar", "mtp"], "qps": [1, 2, 4, 8], "max_num_seqs": [2, 4, 6, 8], "seed": list(range(seeds))}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--requests", type=int, default=100)
    a = ap.parse_args(argv)
    spec = parse_spec(spec_of(a.points, a.requests))
    spec.points = spec.points[:a.points]
    p0 = spec.points[0]
    sent, back = len(pickle.dumps((simulate_job, ([p0],)))), len(pickle.dumps(simulate_job([p0])))
    print(f"{len(spec.points):,} points, {a.requests} requests each; per point: {sent:,} bytes sent to a worker, {back:,} bytes back")
    for w in (int(x) for x in a.workers.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-sweep-") as d:
            w0, c0 = time.perf_counter(), time.process_time()
            out = run_sweep(spec, Path(d), Workers(workers=w))
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        print(f"workers {w}: {out.ran:,} points in {wall:.1f} s wall = {out.ran / wall:,.1f} points/s"
              + (f"; {1e3 * cpu / out.ran:.1f} ms CPU per point in this process" if w == 1 else "; client CPU " f"{cpu:.1f} s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
