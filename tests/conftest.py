import os

import pytest

os.environ.setdefault("COSTMODEL_NO_PROGRESS", "1")


@pytest.fixture
def cli():
    """Run `costmodel ARGS...` in-process; returns (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from costmodel.cli import main

    def run(*args: str):
        runner = CliRunner()
        code_box = {}

        def entry():
            code_box["code"] = main(list(args))

        import io
        import sys
        from contextlib import redirect_stderr, redirect_stdout

        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            entry()
        return code_box["code"], out.getvalue(), err.getvalue()

    return run
