"""Helpers shared by tests/test_endpoint*.py: start the loopback test server, run
`costmodel measure --endpoint ...` in-process, list every file of a run directory."""

from __future__ import annotations

import importlib
import io
import socket
import sys
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from servers.openai_server import ServerProcess  # noqa: F401  (re-exported)


def ensure_measure_cli() -> None:
    """`measure.cli.measure` imports the GPU harness's options; while that package is not in the tree,
    stand in an empty one so the endpoint backend can be exercised through the real command."""
    try:
        importlib.import_module("measure.cli.measure_harness")
    except ImportError:
        import click

        pkg = types.ModuleType("measure.harness")
        pkg.__path__ = []
        mod = types.ModuleType("measure.cli.measure_harness")
        mod.OPTIONS = [click.option("--random-weights", "harness_random_weights", is_flag=True, help="(test stand-in for the GPU harness)")]
        mod.run = lambda opts: 0
        sys.modules["measure.harness"] = pkg
        sys.modules["measure.cli.measure_harness"] = mod


def costmodel(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    ensure_measure_cli()
    from costmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def free_port() -> int:
    """A loopback port with nothing listening on it (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_files(path: Path) -> list[Path]:
    return [p for p in Path(path).rglob("*") if p.is_file()]
