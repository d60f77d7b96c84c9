"""How fast Ctrl-C ends a long command: the seconds from SIGINT (sent to the process group, as a
terminal does) to the process's exit, for a 2M-request simulate in one process, the same over two
worker processes, and a Dask sweep. The targets are those the unit tests once asserted (2 s, 2 s,
5 s: tests/test_bad_input.py holds the exit code and the one line; speed is measured here).

    .venv/bin/python benchmarks/bench_interrupt.py [--repeat 3] [--wait 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import cpu_ticks, steal  # noqa: E402

COSTMODEL = [str(Path(sys.executable).parent / "costmodel")]
SWEEP = {"kind": "simulate", "base": {"mode": "ar", "n_requests": 1_500_000}, "grid": {"qps": [4, 5, 6, 7]}}
CASES = [  # (label, argv, target s)
    ("simulate, 2M requests, 1 process", ["simulate", "--qps", "4", "--mode", "ar", "--requests", "2000000", "-o", "out"], 2.0),
    ("simulate, 2M requests, --jobs 2", ["simulate", "--qps", "4,5", "--mode", "ar", "--requests", "2000000", "--jobs", "2"], 2.0),
    ("sweep on Dask, --jobs 2", ["sweep", "spec.json", "--jobs", "2", "-o", "out"], 5.0),
]


def interrupt_after(argv: list[str], wait_s: float, cwd: Path) -> tuple[int, float]:
    """(exit code, seconds from SIGINT to exit) of `costmodel ARGV` interrupted after `wait_s`."""
    env = {**os.environ, "COSTMODEL_NO_PROGRESS": "1"}
    p = subprocess.Popen(COSTMODEL + argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(wait_s)
    t0 = time.perf_counter()
    os.killpg(p.pid, signal.SIGINT)
    p.wait(timeout=120)
    return p.returncode, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest is reported")
    ap.add_argument("--wait", type=float, default=5.0, help="seconds the command runs before Ctrl-C")
    a = ap.parse_args(argv)
    st0 = cpu_ticks()
    print(f"{'Ctrl-C on':<36} {'exit':>5} {'to exit s':>9}")
    for label, args, target in CASES:
        runs = []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "spec.json").write_text(json.dumps(SWEEP))
                runs.append(interrupt_after(args, a.wait, Path(tmp)))
        code, took = min(runs, key=lambda r: r[1])
        print(f"{label:<36} {code:>5} {took:9.2f}  {'met' if code == 130 and took < target else 'MISSED'} (< {target:g} s, exit 130)")
    print(f"during the runs: {steal(st0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
