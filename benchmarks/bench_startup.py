"""Start-up and a whole command: what a user waits for, measured as processes. Prints the seconds
`costmodel --help`, `costmodel simulate --help` and a one-request `costmodel simulate` (no -o: no
table written, so no table library loaded) take (start-up: the interpreter, the CLI and the
command's imports; the interpreter alone beside it; issue 51: under 0.3 s) and the CPU seconds of a
whole `costmodel simulate` of one hour at 20 QPS (72,000 requests, four replicas, one process) per
mode, start-up included: the figure to compare with another simulator run from its command line.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 5] [--mode diffusion,ar,mtp] [--qps 20] [--hours 1]

Each figure is the fastest of `--repeat` runs: on a shared VM other tenants only ever add time; the
CPU seconds are the figure a loaded machine stretches least. The children write bytecode (as an
installed package has it: PYTHONDONTWRITEBYTECODE would compile every module on every start) and
one untimed run warms it. `--phases` says where the one-request start-up goes (milliseconds per
phase, in the order the command loads them; `python -X importtime` for the modules within one).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import cpu_ticks, steal  # noqa: E402

TARGET_STARTUP_S = 0.3
# the console entry point, run in a fresh interpreter (what `costmodel ...` does)
ENTRY = "import sys; from costmodel.cli import console_main; sys.argv[0] = 'costmodel'; sys.exit(console_main())"
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "COSTMODEL_NO_PROGRESS": "1"}
STARTS = [  # (label, argv): what a user waits for before any work of size
    ("costmodel --help", ["--help"]),
    ("costmodel simulate --help", ["simulate", "--help"]),
    ("simulate, 1 request, no -o", ["simulate", "--mode", "ar", "--qps", "1", "--requests", "1", "--jobs", "1"]),
]


def timed(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of one child process run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fastest(args: list[str], repeat: int) -> tuple[float, float]:
    runs = [timed(args) for _ in range(repeat)]
    return min(w for w, _ in runs), min(c for _, c in runs)


# the one-request simulate, phase by phase in one interpreter: each phase imports what the command would import next
PHASES = [("click and the root group", "import costmodel.cli"), ("simulate's options", "import simulate.cli.simulate"),
          ("the edge (table of inputs)", "import costmodel.cli.edge"), ("numpy", "import numpy"),
          ("the simulator", "import simulate.api"), ("numpy.random", "import numpy.random"),
          ("numpy.ma (np.percentile)", "import numpy.ma"), ("rich console and table", "import rich.console, rich.table"),
          ("the run and its table", "costmodel.cli.main(ARGV)")]
PHASE_CODE = """import gc, io, os, sys, time
from contextlib import redirect_stdout
os.environ["OPENBLAS_NUM_THREADS"] = os.environ.get("OPENBLAS_NUM_THREADS") or "1"  # as the console entry sets it
gc.set_threshold(100_000)
ARGV = {argv!r}
out = []
for code in {codes!r}:
    t = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        exec(code)
    out.append(time.perf_counter() - t)
print(*out)
"""


def phases(repeat: int) -> list[tuple[str, float]]:
    """(phase, fastest ms) of the one-request simulate's start-up, over `repeat` fresh interpreters."""
    code = PHASE_CODE.format(argv=STARTS[-1][1], codes=[c for _, c in PHASES])
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=ENV)  # bytecode written
    runs = [[float(x) for x in subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT,
                                              env=ENV).stdout.split()] for _ in range(repeat)]
    return [(label, 1000 * min(r[i] for r in runs)) for i, (label, _) in enumerate(PHASES)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the fastest is reported")
    ap.add_argument("--mode", default="diffusion,ar,mtp")
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--start-up-only", action="store_true", help="the start-up figures alone (no hour of traffic)")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--phases", action="store_true", help="also the one-request start-up's phases, in milliseconds")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be >= 1")
    py = sys.executable
    st0 = cpu_ticks()
    bare_w, bare_c = fastest([py, "-c", "pass"], a.repeat)
    print(f"{'start-up':<28} {'wall s':>7} {'cpu s':>7}")
    print(f"{'python -c pass':<28} {bare_w:7.3f} {bare_c:7.3f}")
    for label, args in STARTS:
        timed([py, "-c", ENTRY, *args])  # untimed: writes the bytecode an installed package has
        w, c = fastest([py, "-c", ENTRY, *args], a.repeat)
        print(f"{label:<28} {w:7.3f} {c:7.3f}  {'met' if w < TARGET_STARTUP_S else 'MISSED'} (wall < {TARGET_STARTUP_S} s)")
    if a.phases:
        for label, ms in phases(a.repeat):
            print(f"  {label:<26} {ms:7.1f} ms")
    if a.start_up_only:
        print(f"during the runs: {steal(st0)}")
        return 0
    n = int(round(a.qps * 3600 * a.hours))
    print(f"\n`costmodel simulate --qps {a.qps:g} --duration {3600 * a.hours:g} --replicas {a.replicas} --jobs 1` ({n:,} requests), whole process")
    print(f"{'mode':<10} {'wall s':>7} {'cpu s':>7}")
    for mode in a.mode.split(","):
        w, c = fastest([py, "-c", ENTRY, "simulate", "--mode", mode, "--qps", f"{a.qps:g}", "--duration", f"{3600 * a.hours:g}",
                        "--replicas", str(a.replicas), "--jobs", "1"], a.repeat)
        print(f"{mode:<10} {w:7.2f} {c:7.2f}")
    print(f"during the runs: {steal(st0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
