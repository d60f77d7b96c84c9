"""A package costmodel needs and lacks is one line naming it and the install that brings it (base or extra),
never a traceback: the table behind that line is pyproject.toml's dependencies, held together here."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from costmodel.cli import DEPENDENCIES

ROOT = Path(__file__).resolve().parents[1]
NOT_IMPORTED = {"dev"}  # test tools: no command imports them


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def test_the_table_is_pyprojects_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {(_name(r), "") for r in project["dependencies"]}
    declared |= {(_name(r), extra) for extra, reqs in project["optional-dependencies"].items() if extra not in NOT_IMPORTED for r in reqs}
    assert {(dist.lower(), extra) for dist, extra in DEPENDENCIES.values()} == declared


def _run_without(module: str, *args: str) -> subprocess.CompletedProcess:
    code = f"import sys; sys.modules[{module!r}] = None; from costmodel.cli import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_a_missing_base_dependency_is_one_line_naming_it(tmp_path):
    # what a GPU image without simpy printed as a traceback on 2026-11-29 (a day runs the fleet simulator)
    out = tmp_path / "day"
    done = _run_without("simpy", "plan", "--load-curve", "flat:5,hours=1", "--hardware", "h200", "--mode", "ar", "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("error: `costmodel plan` needs simpy, a dependency of costmodel, which is not installed; "
                                   "pip install costmodel (or pip install 'simpy')")
    assert not out.exists()  # refused before anything was written


def test_a_plan_of_loads_runs_without_the_days_simulator(tmp_path):
    done = _run_without("simpy", "plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--refine-crossover", "0", "-o", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / "plan.csv").exists()
