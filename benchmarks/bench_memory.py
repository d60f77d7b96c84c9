"""Memory per simulated request and per replica: the figures behind simulate/workload.py's run-size
budget (BYTES_PER_REQUEST, BYTES_PER_REPLICA). Each measurement runs in a fresh process and reads
its peak resident memory (ru_maxrss), so one point's peak is not hidden by an earlier one's.

    .venv/bin/python benchmarks/bench_memory.py [--requests 200000] [--replicas 20000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulate.workload import BYTES_PER_REPLICA, BYTES_PER_REQUEST  # noqa: E402


def peak_mib(mode: str, n_requests: int, replicas: int) -> dict:
    """Peak RSS (MiB) of one process that simulates one point, and its per-request frame's size."""
    code = (
        "import json, resource\n"
        "from costmodel.shipped import resolve_profile\n"
        "from simulate.point import run_point\n"
        f"r = run_point(resolve_profile(None, 'h200'), {mode!r}, 4.0, n_requests={n_requests}, replicas={replicas})\n"
        "print(json.dumps({'rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,"
        " 'frame': float(r.requests.memory_usage(deep=True).sum()) / 2**20}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--replicas", type=int, default=20_000)
    ap.add_argument("--mode", default="diffusion,ar,mtp")
    args = ap.parse_args(argv)
    worst = 0.0
    for mode in args.mode.split(","):
        small, big = peak_mib(mode, 1000, 1), peak_mib(mode, args.requests, 1)
        per = (big["rss"] - small["rss"]) * 2**20 / (args.requests - 1000)
        worst = max(worst, per)
        print(f"{mode}: {per / 1024:.2f} KiB peak RSS per request ({args.requests:,} requests); "
              f"per-request records kept for -o: {big['frame'] * 2**20 / args.requests:.0f} B per request")
    small, big = peak_mib("mtp", 1000, 1), peak_mib("mtp", 1000, args.replicas)
    rep = (big["rss"] - small["rss"]) * 2**20 / (args.replicas - 1)
    print(f"replicas: {rep / 1024:.2f} KiB peak RSS per replica ({args.replicas:,} replicas)")
    print(f"budget constants: {BYTES_PER_REQUEST / 1024:g} KiB per request (measured worst {worst / 1024:.2f}), "
          f"{BYTES_PER_REPLICA / 1024:g} KiB per replica (measured {rep / 1024:.2f})")
    ok = worst <= BYTES_PER_REQUEST and rep <= BYTES_PER_REPLICA
    print("OK" if ok else "the budget constants are below the measured memory: raise them")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
