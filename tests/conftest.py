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


def pytest_configure(config):
    """Refuse `--dist loadgroup` under a pytest whose node ids pytest-xdist cannot group: the
    real-vLLM tests share session fixtures (one server per mode) that must run on one worker, and
    pytest 9.2's structured node ids silently defeat pytest-xdist 3.8's grouping
    (pytest-dev/pytest-xdist#1386): each worker then started its own servers, two at a time on a
    2-core machine. The `dev` extra pins pytest below 9.2."""
    if getattr(config.option, "dist", None) != "loadgroup" or hasattr(config, "workerinput"):
        return
    if tuple(int(x) for x in pytest.__version__.split(".")[:2]) >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__} breaks --dist loadgroup (pytest-dev/pytest-xdist#1386): "
                                "install the `dev` extra (pytest<9.2), e.g. `make test`")


@pytest.fixture
def coast_vs_stepping(monkeypatch):
    """check(run) -> (numbers, differences): `run()` (a simulate.api.run_point result) as the
    simulator runs it (coasting, lazy replicas), then again with every replica stepped one engine
    step at a time (every step traced, so nothing coasts; it stays so for the rest of the test).
    numbers: the first run's numeric summary fields; differences: (field, coasted, stepped) for each
    that differs beyond float rounding (NaN equals NaN). The shortcuts must change no answer."""
    import dataclasses
    import math

    import simulate.sim as simmod

    engine_for = simmod.engine_for

    def traced(mode: str):
        class Traced(engine_for(mode)):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.trace = []

        return Traced

    def numbers(res) -> dict:
        s = dataclasses.asdict(res.summary)
        return {k: v for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def same(a: float, b: float) -> bool:
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    def check(run) -> tuple[dict, list]:
        fast = numbers(run())
        monkeypatch.setattr(simmod, "engine_for", traced)
        stepped = numbers(run())
        return fast, [(k, fast[k], stepped[k]) for k in fast if not same(fast[k], stepped[k])]

    return check


@pytest.fixture
def toy_simulator(monkeypatch):
    """toy_simulator(fn) puts `fn` in place of the plan's simulator (simulate.plan.planner.simulator_point) for one test. The
    plan keeps every replication it simulated on its profile objects (planner.process_profile, one per GPU in the process),
    so they are dropped before the toy runs and after: no toy row reaches a real plan, nor a real row a toy plan."""
    from simulate.plan import planner

    planner.process_profile.cache_clear()
    yield lambda fn: monkeypatch.setattr(planner, "simulator_point", fn)
    planner.process_profile.cache_clear()
