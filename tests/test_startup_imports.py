"""A command imports what it runs (issue 40, start-up): `costmodel simulate` declares its options and
simulates without the table, fitting, workbook, plotting, SimPy, GPU or HTTP libraries; they load
where a table is written or read (-o, --price-file, --engine-from, plan, report). Each case runs in
a fresh interpreter, as the console entry does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "pyarrow", "statsmodels", "scipy", "openpyxl", "matplotlib", "plotly", "simpy", "torch", "transformers", "vllm",
         "httpx", "dask", "distributed")


def loaded_after(argv: list[str], names) -> list[str]:
    """Those of `names` (modules) loaded once `costmodel ARGV` has run in a fresh interpreter."""
    code = ("import json, sys\nfrom costmodel.cli import console_main\nsys.argv = ['costmodel', *json.loads(sys.argv[1])]\n"
            "try:\n    console_main()\nexcept SystemExit:\n    pass\n"
            f"print(json.dumps(sorted(set(sys.modules) & set({sorted(names)!r}))))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "COSTMODEL_NO_PROGRESS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def heavy_loaded(argv: list[str]) -> list[str]:
    """The HEAVY packages loaded once `costmodel ARGV` has run in a fresh interpreter."""
    return loaded_after(argv, HEAVY)


@pytest.mark.parametrize("argv", [["simulate", "--help"], ["--help"]], ids=" ".join)
def test_declaring_options_loads_no_heavy_library(argv):
    assert heavy_loaded(argv) == []


def after_simulate_help(expr: str) -> str:
    """What `expr` (Python, over sys.modules) prints once `costmodel simulate --help` has run in a fresh interpreter."""
    code = ("import sys\nfrom costmodel.cli import console_main\nsys.argv = ['costmodel', 'simulate', '--help']\n"
            f"try:\n    console_main()\nexcept SystemExit:\n    pass\nprint({expr})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_declaring_the_simulate_options_loads_no_numpy():
    """The modes' and GPUs' names and settings are declared without numpy: a function that computes imports it."""
    assert after_simulate_help("'numpy' in sys.modules") == "False"


def test_the_help_of_simulate_loads_no_simulator():
    """Declaring options needs the registries (modes, GPUs, routers), not the simulator that runs them."""
    modules = ("('simulate.api', 'simulate.sim', 'simulate.workload', 'rich.progress', 'rich.console', 'rich.table', 'multiprocessing', "
               "'costmodel.outputset', 'costmodel.costing.pricing')")
    assert after_simulate_help(f"sorted(m for m in sys.modules if m in {modules})") == "[]"


def test_a_simulation_printed_not_written_loads_no_table_library():
    assert heavy_loaded(["simulate", "--mode", "ar", "--qps", "4", "--requests", "200"]) == []


def test_writing_the_tables_loads_them(tmp_path):
    """The other side of the rule: -o writes parquet and CSV, so pandas comes in where they are written."""
    assert "pandas" in heavy_loaded(["simulate", "--mode", "ar", "--qps", "4", "--requests", "200", "-o", str(tmp_path / "out")])
    assert (tmp_path / "out" / "summary.csv").exists()


# Each command's --help, as it is: the heavy libraries the project's code asks for while it declares the
# command's options (an import statement executed, whether or not the library was loaded before). A command
# may shed one (then shrink its entry); none may gain one unnoticed. `costmodel --help` and `simulate` ask none.
HELP_LOADS = {
    "roofline": {"pandas"},
    "memory": set(),
    "hardware": set(),
    "models": set(),
    "measure": {"httpx", "pandas", "scipy", "statsmodels"},
    "import-bench": {"httpx", "pandas"},
    "analyze": {"pandas", "scipy"},
    "fit": {"pandas", "scipy", "statsmodels"},
    "profile": {"pandas", "scipy", "statsmodels"},
    "simulate": set(),
    "plan": set(),
    "sweep": {"pandas"},
    "report": {"openpyxl", "pandas", "plotly"},
    "validate": {"pandas", "simpy"},
    "compare-bench": {"pandas"},
}
# One interpreter loads the table libraries once, then forks a child per command: each child starts from the
# same state (no project module of a command loaded) and records the heavy imports the project's code asks for
# (builtins.__import__), so one command's imports never hide another's and no child pays for pandas again.
ASKED = """
import builtins, json, os, sys, io, contextlib
for lib in ("pandas", "pyarrow", "pyarrow.parquet", "scipy.stats", "statsmodels.api", "openpyxl", "plotly.graph_objects", "simpy", "httpx"):
    __import__(lib)
from costmodel.cli import main
heavy = set(json.loads(sys.argv[2]))
out = {}
for name in json.loads(sys.argv[1]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        asked, real = set(), builtins.__import__

        def recording(mod, globals=None, locals=None, fromlist=(), level=0):
            top = mod.split(".")[0]
            if level == 0 and top in heavy and (globals or {}).get("__name__", "").split(".")[0] in ("costmodel", "measure", "simulate", "reports", "pipeline"):
                asked.add(top)
            return real(mod, globals, locals, fromlist, level)

        builtins.__import__ = recording
        with contextlib.redirect_stdout(io.StringIO()):
            main([name, "--help"])
        os.write(w, json.dumps(sorted(asked)).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    out[name] = json.loads(data or b"null")
print(json.dumps(out))
"""


def test_every_command_is_held_to_its_import_set():
    from costmodel.cli import COMMANDS

    assert set(HELP_LOADS) == set(COMMANDS)
    run = subprocess.run([sys.executable, "-c", ASKED, json.dumps(list(COMMANDS)), json.dumps(list(HEAVY))], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    asked = json.loads(run.stdout.strip().splitlines()[-1])
    for name in COMMANDS:
        assert asked[name] is not None, f"`costmodel {name} --help` failed in its child"
        assert set(asked[name]) <= HELP_LOADS[name], f"`costmodel {name} --help` now asks for {sorted(set(asked[name]) - HELP_LOADS[name])}"


def test_a_one_request_simulation_loads_no_table_library():
    """The start-up figure of benchmarks/bench_startup.py: one request, printed, not written."""
    assert heavy_loaded(["simulate", "--mode", "ar", "--qps", "1", "--requests", "1", "--jobs", "1"]) == []


# What a one-request `simulate`, printed, runs without (issue 51: under 0.3 s with start-up): worker processes'
# machinery (--jobs 1 runs in this process), the output set's writers (no -o), the price path and its models (no
# pricing option), the progress bar (no terminal). Each loads where it is used; a module that starts to load
# here again costs every simulate (the 72k-request benchmark too) its import.
NOT_ON_A_PRINTED_RUN = ("multiprocessing", "logging", "concurrent.futures", "costmodel.outputset", "costmodel.atomic",
                        "costmodel.costing.pricing", "costmodel.costing.models", "costmodel.costing.costs", "costmodel.schemas.plan",
                        "costmodel.schemas.bench_result", "rich.progress")


def test_a_one_request_simulation_loads_only_what_it_runs():
    assert loaded_after(["simulate", "--mode", "ar", "--qps", "1", "--requests", "1", "--jobs", "1"], NOT_ON_A_PRINTED_RUN) == []


def test_the_root_help_loads_the_command_table_alone():
    """`costmodel --help` lists the commands from their names (costmodel/cli/__init__.py COMMANDS, HELP): no command
    module, no rich, no numpy."""
    assert loaded_after(["--help"], ("rich", "numpy", "simulate", "costmodel.modes", "costmodel.hardware", "costmodel.console")) == []


def test_pricing_the_points_loads_the_price_path():
    """The other side: a pricing option loads the pricing models where the points are priced."""
    assert "costmodel.costing.pricing" in loaded_after(["simulate", "--mode", "ar", "--qps", "1", "--requests", "1", "--jobs", "1",
                                                        "--pricing", "spot"], NOT_ON_A_PRINTED_RUN)


def test_a_costmodel_process_starts_one_blas_thread_unless_the_user_chose():
    """numpy's OpenBLAS starts its thread pool when it loads: one thread, unless OPENBLAS_NUM_THREADS or
    OMP_NUM_THREADS is set, or the command runs an engine to measure it (its environment stays the user's)."""
    from costmodel.cli import one_blas_thread

    for command, env, after in (("simulate", {}, {"OPENBLAS_NUM_THREADS": "1"}), (None, {}, {"OPENBLAS_NUM_THREADS": "1"}),
                                ("plan", {"OPENBLAS_NUM_THREADS": "8"}, {"OPENBLAS_NUM_THREADS": "8"}),
                                ("fit", {"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4"}), ("measure", {}, {}), ("validate", {}, {})):
        one_blas_thread(command, env)
        assert env == after, command


def test_a_costmodel_process_collects_garbage_in_larger_batches():
    """The console entry raises the collector's first threshold: a start-up's objects live as long as the process."""
    code = ("import gc, sys\nfrom costmodel.cli import GC_THRESHOLD, console_main\nsys.argv = ['costmodel', '--help']\n"
            "try:\n    console_main()\nexcept SystemExit:\n    pass\nprint(gc.get_threshold()[0] == GC_THRESHOLD)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr[-2000:]


def test_a_plan_forks_its_workers_before_the_table_library_loads(tmp_path):
    """`costmodel plan` forks its workers with the simulator and the profiles only, and loads pandas and the costing while
    they run the first replications (simulate/plan/api.py run_plan): the workers never load them, the plan's process does."""
    code = ("import json, sys\nimport simulate.parallel as par\nseen = {}\nstart = par.AffinityPool.start\n"
            "def recording(self):\n    seen.setdefault('at_fork', sorted(set(sys.modules) & {'pandas', 'rich.table', 'costmodel.costing.cheapest'}))\n"
            "    return start(self)\npar.AffinityPool.start = recording\n"
            "from costmodel.cli import console_main\nsys.argv = ['costmodel', *json.loads(sys.argv[1])]\n"
            "try:\n    console_main()\nexcept SystemExit:\n    pass\n"
            "print(json.dumps([seen.get('at_fork'), 'pandas' in sys.modules]))")
    argv = ["plan", "--hardware", "h200", "--mode", "ar", "--qps", "4", "--refine-crossover", "0", "--jobs", "2", "-o", str(tmp_path / "plan")]
    out = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "COSTMODEL_NO_PROGRESS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], True]
    assert (tmp_path / "plan" / "plan.csv").exists()
