"""Wall time of the done-when target: `costmodel plan` on the shipped defaults, then `costmodel
report` to the finance CSV (+ data dictionary) and to the HTML, each as a fresh process the way a
user runs them. Prints each command's wall time and the total against the 60 s budget.

    python -m benchmarks.bench_plan_report [-o DIR] [--check-html]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 60.0


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(f"failed (exit {r.returncode}): {' '.join(cmd)}")
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Time costmodel plan + report on the shipped defaults.")
    ap.add_argument("-o", "--out", default=None, help="directory to keep the outputs in (default: a temporary one)")
    ap.add_argument("--check-html", action="store_true", help="also render the HTML in headless Chromium (not timed)")
    args = ap.parse_args(argv)
    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="costmodel-bench-")
    out = Path(args.out or tmp.name)
    cm = [sys.executable, "-c", "from costmodel.cli import console_main; console_main()"]  # the `costmodel` script, this interpreter
    steps = [
        ("plan (shipped defaults)", cm + ["plan", "-o", str(out / "plan")]),
        ("report -> CSV + dictionary", cm + ["report", str(out / "plan"), "-o", str(out / "plan-report.csv")]),
        ("report -> HTML", cm + ["report", str(out / "plan"), "-o", str(out / "plan-report.html")]),
        ("report -> workbook", cm + ["report", str(out / "plan"), "-o", str(out / "plan-budget.xlsx")]),
    ]
    total = 0.0
    for name, cmd in steps:
        w = run(cmd)
        total += w
        print(f"{name:30s} {w:6.1f} s   (costmodel {' '.join(cmd[3:])})")
    files = ["plan/plan.csv", "plan/plan.dictionary.csv", "plan/plan.json", "plan-report.csv", "plan-report.dictionary.csv", "plan-report.html",
             "plan-budget.xlsx"]
    missing = [f for f in files if not (out / f).exists()]
    print(f"{'total':30s} {total:6.1f} s   (budget {BUDGET_S:.0f} s: {'OK' if total < BUDGET_S else 'OVER'})")
    if missing:
        print(f"missing outputs: {', '.join(missing)}")
    if args.check_html:
        from benchmarks.browser_check import check_html

        res = check_html(out / "plan-report.html")
        print("html check in headless chromium: " + ("OK, charts: " + ", ".join(c["key"] for c in res.charts) if res.ok else "; ".join(res.problems)))
        if not res.ok:
            return 1
    if tmp:
        tmp.cleanup()
    else:
        print(f"outputs in {out}")
    return 0 if total < BUDGET_S and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
