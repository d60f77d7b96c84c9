"""Wall time of the README's default plan, the whole command (interpreter start, imports, the
replica searches with every point's verdict settled over replications, analysis and files):
`costmodel plan -o DIR` with no other options. Target (issue 51): <= 3 s on the 2-core dev machine;
CPU seconds are printed beside it (the machine is shared), and what the plan simulated.

    .venv/bin/python benchmarks/bench_plan.py [--runs 3] [-- extra plan options]
    .venv/bin/python benchmarks/bench_plan.py --breakdown   # where one serial plan's CPU time goes
    .venv/bin/python benchmarks/bench_plan.py --phases      # where the default (parallel) plan's wall time goes
    .venv/bin/python benchmarks/bench_plan.py --against 3048977 --runs 6   # side by side with a commit, runs alternating

--breakdown runs the plan once serially in this process (`--jobs 1`) and splits its CPU time into
importing the CLI, step pricing (the outermost pass prices, `costmodel.stepcost.ModeCost.pass_ms`:
the pass predictors' table interpolation or linear model and the roofline floor), the analyses (pricing,
verdicts and crossovers: `costmodel.costing.crossovers` once per crossover round in the main process while the
workers wait, then `costmodel.costing.analyse`) and the rest (the simulations, deploying points, summaries, files).

--phases runs the default plan once in this process (its workers forked as the command forks them) and
splits its wall time into importing the plan's modules, the QPS grid's replica searches (the analysis's
libraries load during them, beside the first replications), the crossover
search's rounds (their simulations, and the analyses between them, in which the workers wait), the final
analysis, and writing and printing the files; with the CPU seconds of this process and of the workers.

--against REV times the same command of this work tree and of commit REV (its files from `git archive`, its
simulator compiled in a temporary folder), one run of each in turn: this VM's speed drifts by up to 1.5x
within minutes, so a change is judged against the code before it in the same minutes, not against a figure
measured earlier.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import cpu_ticks, steal  # noqa: E402

TARGET_S = 3.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="one serial in-process plan, its CPU time split (see above)")
    ap.add_argument("--phases", action="store_true", help="one default plan in this process, its wall time split (see above)")
    ap.add_argument("--against", metavar="REV", help="alternate runs with commit REV's code (see above)")
    ap.add_argument("extra", nargs="*", help="extra `costmodel plan` options (after --)")
    a = ap.parse_args(argv)
    if a.against:
        return against(a.against, a.runs, a.extra)
    if a.breakdown:
        return breakdown(a.extra)
    if a.phases:
        return phases(a.extra)
    exe = Path(sys.executable).with_name("costmodel")
    cmd = [str(exe) if exe.exists() else "costmodel", "plan", *a.extra]
    walls, cpus = [], []
    st0 = cpu_ticks()
    for _ in range(a.runs):
        out = tempfile.mkdtemp(prefix="bench-plan-")
        try:
            r0 = os.times()
            w0 = time.perf_counter()
            p = subprocess.run([*cmd, "-o", out], capture_output=True, text=True)
            walls.append(time.perf_counter() - w0)
            r1 = os.times()
            cpus.append((r1.children_user - r0.children_user) + (r1.children_system - r0.children_system))
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                return p.returncode
            sims = next((ln for ln in p.stdout.splitlines() if " simulations; wrote" in ln), "").split(" simulations")[0]
            work = _work(Path(out) / "plan.json")
        finally:
            shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    med = statistics.median(walls)
    from costmodel import native

    print(native.status())
    print(f"`{' '.join(cmd[1:])} -o DIR`: {sims} simulations ({work}); wall s per run {', '.join(f'{w:.2f}' for w in walls)} "
          f"(median {med:.2f}, CPU s median {statistics.median(cpus):.2f}); load average {load:.2f}; {steal(st0)}; "
          f"target <= {TARGET_S:g} s: {'met' if med <= TARGET_S else 'MISSED'}")
    return 0 if med <= TARGET_S else 1


RUN = "import sys; from costmodel.cli import console_main; console_main()"  # `costmodel` of whichever tree is first on the path


def against(rev: str, runs: int, extra: list[str]) -> int:
    """`costmodel plan` of this tree and of commit `rev`, alternating, `runs` times each: wall seconds and medians."""
    root = Path(__file__).resolve().parents[1]
    snap = Path(tempfile.mkdtemp(prefix="bench-plan-rev-"))
    try:
        files = subprocess.run(["git", "-C", str(root), "archive", rev], capture_output=True)
        if files.returncode != 0:
            print(f"error: --against {rev}: git archive failed ({files.stderr.decode().strip()}); give a commit of this repository", file=sys.stderr)
            return 2
        subprocess.run(["tar", "x", "-C", str(snap)], input=files.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": str(snap)}
        subprocess.run([sys.executable, "-m", "simulate.build_native"], cwd=snap, env=env, capture_output=True, check=True)
        sides = {"this tree": (root, dict(os.environ)), rev: (snap, env)}
        walls: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(runs):
            for name, (cwd, side_env) in sides.items():
                out = tempfile.mkdtemp(prefix="bench-plan-")
                try:
                    w0 = time.perf_counter()
                    p = subprocess.run([sys.executable, "-c", RUN, "plan", *extra, "-o", out], cwd=cwd, env=side_env, capture_output=True, text=True)
                    walls[name].append(time.perf_counter() - w0)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                if p.returncode != 0:
                    print(p.stderr, file=sys.stderr)
                    return p.returncode
    finally:
        shutil.rmtree(snap, ignore_errors=True)
    meds = {name: statistics.median(w) for name, w in walls.items()}
    for name, w in walls.items():
        print(f"{name}: wall s per run {', '.join(f'{x:.2f}' for x in w)} (median {meds[name]:.2f})")
    mine, theirs = meds["this tree"], meds[rev]
    print(f"`{' '.join(['plan', *extra])}` side by side, {runs} runs each, alternating: this tree {mine:.2f} s against {rev} {theirs:.2f} s "
          f"(median; {100 * (mine - theirs) / theirs:+.0f}%); target <= {TARGET_S:g} s: {'met' if mine <= TARGET_S else 'MISSED'}")
    return 0


def _work(plan_json: Path) -> str:
    """What the plan simulated, from its plan.json: points by verdict, replications, and the crossover search's share."""
    import json

    doc = json.loads(plan_json.read_text())
    pts = doc.get("points", [])
    asked = set(doc["settings"].get("qps", [])) - set(doc["settings"].get("crossover_search_qps", []))
    verdicts = {v: sum(p.get("slo_verdict") == v for p in pts) for v in ("pass", "fail", "borderline")}
    cross = sum(int(p.get("replications") or 0) for p in pts if p["qps"] not in asked)
    return (f"points {len(pts)}: {verdicts['pass']} pass, {verdicts['fail']} fail, {verdicts['borderline']} borderline; "
            f"{cross} of the simulations at the crossover search's QPS")


def breakdown(extra: list[str]) -> int:
    t0 = time.process_time()
    from costmodel.cli import main as cli_main
    from costmodel.stepcost import ModeCost

    t_imports = time.process_time() - t0
    pricing = {"s": 0.0, "calls": 0, "depth": 0}
    pass_ms = ModeCost.pass_ms

    def timed(self, *args, **kw):
        if pricing["depth"]:  # only the outermost call: nested ones are inside its time
            return pass_ms(self, *args, **kw)
        pricing["depth"] = 1
        c0 = time.process_time()
        try:
            return pass_ms(self, *args, **kw)
        finally:
            pricing["s"] += time.process_time() - c0
            pricing["calls"] += 1
            pricing["depth"] = 0

    ModeCost.pass_ms = timed
    import costmodel.costing as costing

    real = {name: getattr(costing, name) for name in ("analyse", "crossovers")}
    analysis = {"s": 0.0, "calls": 0}

    def timed_analysis(fn):  # the plan's pricing and crossovers, in the main process between the crossover rounds
        def run(*args, **kw):
            c0 = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                analysis["s"] += time.process_time() - c0
                analysis["calls"] += 1
        return run

    for name, fn in real.items():
        setattr(costing, name, timed_analysis(fn))  # (run_plan imports them from costmodel.costing when it runs)
    out = tempfile.mkdtemp(prefix="bench-plan-")
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        code = cli_main(["plan", "--jobs", "1", *extra, "-o", out])
    except SystemExit as e:
        code = e.code
    finally:
        ModeCost.pass_ms = pass_ms
        for name, fn in real.items():
            setattr(costing, name, fn)
        shutil.rmtree(out, ignore_errors=True)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    from costmodel import native

    print(native.status())
    print(f"serial plan in one process: imports {t_imports:.2f} s CPU; plan {wall:.2f} s wall, {cpu:.2f} s CPU, of which step pricing "
          f"{pricing['s']:.2f} s ({pricing['calls']:,} ModeCost.pass_ms calls), the analyses {analysis['s']:.2f} s ({analysis['calls']} of them: "
          f"one per crossover round, then the full one) and the rest {cpu - pricing['s'] - analysis['s']:.2f} s (the simulations, files)")
    return int(code or 0)


def phases(extra: list[str]) -> int:
    w0 = time.perf_counter()
    from costmodel.cli import main as cli_main
    import simulate.cli.plan as plan_cli
    import simulate.plan.api as plan_api
    from simulate.plan import planner

    spent: dict[str, list[float]] = {}  # phase -> [wall s, this process's CPU s, calls]

    def timed(name: str, fn):
        def run(*args, **kw):
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                got = spent.setdefault(name, [0.0, 0.0, 0])
                got[0] += time.perf_counter() - t
                got[1] += time.process_time() - c
                got[2] += 1
        return run

    import costmodel.costing as costing

    saved = (planner.run_searches, planner.run_chains, plan_cli.write_plan, plan_api.analysis_libraries)
    real: dict = {}  # costmodel.costing's analyse and crossovers, timed once the plan has loaded them (its workers fork before)

    def libraries():
        saved[3]()
        real.update(analyse=costing.analyse, crossovers=costing.crossovers)
        costing.analyse = timed("analyses", real["analyse"])  # (run_plan imports both from costmodel.costing after this)
        costing.crossovers = timed("analyses", real["crossovers"])

    planner.run_searches = timed("grid", saved[0])
    planner.run_chains = timed("chains", saved[1])
    plan_cli.write_plan = timed("files", saved[2])
    plan_api.analysis_libraries = timed("libraries", libraries)
    t_imports = time.perf_counter() - w0
    out = tempfile.mkdtemp(prefix="bench-plan-")
    r0, t0 = os.times(), time.perf_counter()
    try:
        code = cli_main(["plan", *extra, "-o", out])
    except SystemExit as e:
        code = e.code
    finally:
        planner.run_searches, planner.run_chains, plan_cli.write_plan, plan_api.analysis_libraries = saved
        for name, fn in real.items():
            setattr(costing, name, fn)
        shutil.rmtree(out, ignore_errors=True)
    wall, r1 = time.perf_counter() - t0, os.times()
    grid, chains, analyses, files, libraries = (spent.get(k, [0.0, 0.0, 0]) for k in ("grid", "chains", "analyses", "files", "libraries"))
    rounds = [chains[0] - grid[0], chains[2] - 1]  # the chains' runs after the grid's: the crossover rounds
    from costmodel import native

    print(native.status())
    print(f"default plan in one process (its workers forked): imports {t_imports:.2f} s; plan {wall:.2f} s wall = the grid's searches "
          f"{grid[0]:.2f} s (the analysis's libraries loading beside its first replications {libraries[0]:.2f} s of it) + the crossover's "
          f"{rounds[1]} rounds {rounds[0]:.2f} s + the {analyses[2]} analyses {analyses[0]:.2f} s "
          f"(the workers wait) + files and tables {files[0]:.2f} s + the rest {wall - grid[0] - rounds[0] - analyses[0] - files[0]:.2f} s; "
          f"CPU s: this process {r1.user - r0.user + r1.system - r0.system:.2f}, the workers {r1.children_user - r0.children_user + r1.children_system - r0.children_system:.2f}; "
          f"load average {os.getloadavg()[0]:.2f}")
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
