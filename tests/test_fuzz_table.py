"""Fuzz drawn from the table of inputs (costmodel/inputs.py), so a new option is fuzzed the day it
is declared: every numeric option just past its bounds, every scoped option outside its scope, every
single-valued option given twice - each refused in one line naming it, exit 2, no traceback, before
any work (the edge checks them, so each run is milliseconds, in-process)."""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import click
import pytest

from costmodel import inputs
from costmodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(ROOT / "costmodel" / "data" / "profiles" / "h200.json")
# the cheapest invocation of each command that parses ("OUT": a fresh output path)
BASE = {
    "roofline": [], "memory": [], "hardware": [], "simulate": ["--qps", "1", "--requests", "5", "--jobs", "1"],
    "plan": ["--hardware", "h200", "-o", "OUT"], "sweep": [PROFILE, "-o", "OUT"], "report": [PROFILE, "-o", "OUT"],
    "analyze": [PROFILE, "-o", "OUT"], "import-bench": [PROFILE, "-o", "OUT"], "fit": [PROFILE, "-o", "OUT"],
    "measure": ["-o", "OUT"], "validate": ["-o", "OUT"], "compare-bench": [PROFILE],
    "profile roofline": ["--hardware", "h200", "-o", "OUT"], "profile project": [PROFILE, "--hardware", "h200", "--precision", "fp8", "-o", "OUT"],
    "profile carry-term": [PROFILE, "--from", PROFILE, "-o", "OUT"],
}


def _params():
    from tests.test_input_table import _commands

    for path, cmd in _commands():
        if path in BASE:
            for p in cmd.params:
                if isinstance(p, click.Option) and p.name not in ("help", "version"):
                    decl = next((d for d in (inputs.option(path, o) for o in p.opts) if d is not None), None)
                    yield path, p, decl


PARAMS = list(_params())


def run(tmp_path: Path, path: str, *extra: str) -> tuple[int, str]:
    args = [*path.split(), *[str(tmp_path / "out") if a == "OUT" else a for a in BASE[path]], *extra]
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(args)
    return code, err.getvalue()


def _one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


def _text(v) -> str:
    return v if isinstance(v, str) else (f"{v:.17g}" if isinstance(v, float) else str(v))


NUMERIC = [(path, p, d) for path, p, d in PARAMS if d is not None and d.field is not None and not p.is_flag]


@pytest.mark.parametrize("path, param, decl", NUMERIC, ids=[f"{c} {d.name}" for c, _, d in NUMERIC])
def test_every_number_past_its_bounds_is_one_line(tmp_path, path, param, decl):
    for v in inputs.past_bounds(decl.field):
        if isinstance(v, float) and math.isnan(v):
            continue  # click's own parse refuses 'nan' for an int; a float 'nan' is below
        code, err = run(tmp_path, path, param.opts[-1], _text(v))
        assert code == 2 and "Traceback" not in err, (v, err)
        assert decl.name in err or param.opts[-1] in err or "Invalid value" in err, (v, err)
        assert not (tmp_path / "out").exists()


SCOPED = [(path, p, d) for path, p, d in PARAMS if d is not None and d.scope is not None]


@pytest.mark.parametrize("path, param, decl", SCOPED, ids=[f"{c} {d.name}" for c, _, d in SCOPED])
def test_every_option_outside_its_scope_is_refused_naming_the_scope(tmp_path, path, param, decl):
    value = [] if param.is_flag else [_text(inputs.at_bounds(decl.field)[0]) if decl.field is not None else PROFILE]
    code, err = run(tmp_path, path, *decl.scope.outside(str(tmp_path)), param.opts[-1], *value)
    _one_line(code, err, f"{decl.name} applies to {decl.scope.text()} only")


SINGLE = [(path, p, d) for path, p, d in PARAMS if not p.multiple and not p.count and not p.is_flag and d is not None]


@pytest.mark.parametrize("path, param, decl", SINGLE, ids=[f"{c} {d.name}" for c, _, d in SINGLE])
def test_every_single_valued_option_given_twice_is_refused(tmp_path, path, param, decl):
    code, err = run(tmp_path, path, param.opts[-1], "1", param.opts[-1], "2")
    _one_line(code, err, f"{max(param.opts, key=len)} is given twice", f"and {param.opts[-1]} 1)" if param.opts[-1] in BASE[path] or
              param.opts[0] in BASE[path] else f"({param.opts[-1]} 1 and {param.opts[-1]} 2)")
    assert not (tmp_path / "out").exists()


# ---- every repeated key, row or column: refused with the place that repeats ----------------------
def _json_twice(key: str, value, rest: str = "") -> str:
    v = __import__("json").dumps(value)
    return "{" + f'"{key}": {v}, "{key}": {v}' + (", " + rest if rest else "") + "}"


def _first_key(source: str) -> str:
    return next(i.name for i in inputs.fields_of(source) if "." not in i.name)


def _repeated(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(source, argv, needle): a document of each file the table declares, its first declared key given twice."""
    w = lambda name, text: str((tmp / name).write_text(text, encoding="utf-8") and tmp / name)  # noqa: E731
    plan = ["plan", "--hardware", "h200", "--mode", "ar", "-o", str(tmp / "out")]
    hw = (ROOT / "costmodel" / "data" / "hardware.json").read_text()
    return [
        ("workload", ["simulate", "--qps", "1", "--requests", "5", "--workload", w("w.json", _json_twice(_first_key("workload"), "poisson"))], "twice"),
        ("sweep spec", ["sweep", w("s.yaml", f"{_first_key('sweep spec')}: simulate\n{_first_key('sweep spec')}: plan\n"), "-o", str(tmp / "out")],
         "appears twice"),
        ("sweep spec", ["sweep", w("s.json", _json_twice(_first_key("sweep spec"), "simulate")), "-o", str(tmp / "out")], "twice"),
        ("hardware file", ["roofline", "--hardware-file", w("hw.json", hw.replace('"gpus": {', '"gpus": {"x": {}, "x": {}, ', 1))], "twice"),
        ("bench file", ["compare-bench", w("b.json", _json_twice(_first_key("bench file"), 5, '"duration": 10'))], "twice"),
        ("profile", ["profile", "validate", w("p.json", (ROOT / "costmodel/data/profiles/h200.json").read_text().replace("{", '{"notes": [], ', 1))],
         "twice"),
        ("price file", [*plan, "--qps", "2", "--price-file", w("pr.csv", "hardware,price_usd_per_gpu_hour\nh200,3\nh200,4\n")], "line 3 prices h200 again"),
        ("price file", [*plan, "--qps", "2", "--price-file", w("pr2.csv", "hardware,price_usd_per_gpu_hour,price_usd_per_gpu_hour\nh200,3,4\n")],
         "line 1 names the column 'price_usd_per_gpu_hour' twice"),
        ("load curve", [*plan, "--load-curve", w("c.csv", "time_s,qps,qps\n0,1,2\n3600,1,2\n")], "line 1 names the column 'qps' twice"),
        ("load curve", [*plan, "--load-curve", "diurnal:peak=4,trough=2,hours=1,hours=2"], "gives hours twice"),
        ("trace", [*plan, "--load-curve", w("t.csv", "arrival_s,prompt_tokens,output_tokens,output_tokens\n0,1,1,2\n1,1,1,2\n")],
         "names the column 'output_tokens' twice"),
        ("fleet", ["plan", "--load-curve", "flat:2,hours=1", "--fleet", w("f.json", _json_twice("pools", [])), "-o", str(tmp / "out")], "twice"),
    ]


def test_every_repeated_key_row_or_column_is_refused(tmp_path):
    for source, argv, needle in _repeated(tmp_path):
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(argv)
        _one_line(code, err.getvalue(), needle)
        assert not (tmp_path / "out").exists(), source


# ---- every declared file field past its bounds: refused naming the field and where it was given ---
SPEC_NUMBERS = [i for i in inputs.fields_of("sweep spec") if i.field is not None and i.kind in ("count", "real") and "." not in i.name]


@pytest.mark.parametrize("decl", SPEC_NUMBERS, ids=lambda i: i.name)
def test_every_sweep_spec_number_past_its_bounds_names_spec_point_and_field(tmp_path, decl):
    for v in inputs.past_bounds(decl.field):
        if isinstance(v, float) and math.isnan(v):
            continue  # JSON has no NaN: the spec reader refuses it as not a number (test_fuzz_cli)
        spec = tmp_path / "s.json"
        base = {"mode": "ar", "qps": 1, "n_requests": 5, "hardware": "h200"}
        spec.write_text(__import__("json").dumps({"kind": "simulate", "base": base, "points": [{decl.name: v}]}))
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["sweep", str(spec), "--jobs", "1", "-o", str(tmp_path / "out")])
        _one_line(code, err.getvalue(), "s.json", decl.name)
        assert not (tmp_path / "out" / "results.csv").exists()


HW_NUMBERS = [i for i in inputs.fields_of("hardware file") if i.field is not None]


@pytest.mark.parametrize("decl", HW_NUMBERS, ids=lambda i: i.name)
def test_every_hardware_file_number_past_its_bounds_is_one_line(tmp_path, decl):
    import json

    entry = json.loads((ROOT / "costmodel/data/hardware.json").read_text())["gpus"]["h200"]
    for v in inputs.past_bounds(decl.field):
        if isinstance(v, float) and math.isnan(v):
            continue
        doc = {**entry, decl.name: ({k: v for k in entry[decl.name]} if isinstance(entry.get(decl.name), dict) else v)}
        f = tmp_path / "hw.json"
        f.write_text(json.dumps({"gpus": {"my-gpu": doc}}))
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["roofline", "--hardware", "my-gpu", "--hardware-file", str(f)])
        _one_line(code, err.getvalue(), "my-gpu")


def _workload(name: str, v):
    """A workload whose field `name` (as the table declares it) holds v, the rest valid."""
    leaf = name.split(".")[-1]
    return {"arrival.cv": {"arrival": {"process": "gamma", "cv": v}}, "regime_mix": {"regime_mix": {"R1": v}},
            "prompt_tokens": {"prompt_tokens": v}, "output_tokens": {"output_tokens": v},
            "prompt_tokens.median": {"prompt_tokens": {"dist": "lognormal", "median": v, "sigma": 0.5}},
            "prompt_tokens.sigma": {"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": v}},
            "system_prompt.tokens": {"system_prompt": {"tokens": v, "apps": 1}}, "system_prompt.apps": {"system_prompt": {"tokens": 10, "apps": v}},
            "sessions.turns": {"sessions": {"turns": v, "think_s": 1}}, "sessions.think_s": {"sessions": {"turns": 2, "think_s": v}},
            "trace_hash_block_tokens": {"trace_hash_block_tokens": v}}.get(name, {leaf: v})


WORKLOAD_NUMBERS = [i for i in inputs.fields_of("workload") if i.field is not None]


@pytest.mark.parametrize("decl", WORKLOAD_NUMBERS, ids=lambda i: i.name)
def test_every_workload_number_past_its_bounds_is_one_line(tmp_path, decl):
    import json

    for v in inputs.past_bounds(decl.field):
        if isinstance(v, float) and math.isnan(v):
            continue
        f = tmp_path / "w.json"
        f.write_text(json.dumps(_workload(decl.name, v)))
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["simulate", "--qps", "1", "--requests", "5", "--mode", "ar", "--jobs", "1", "--workload", str(f)])
        _one_line(code, err.getvalue(), "w.json", decl.name.split(".")[-1])


TRACE_NUMBERS = [i for i in inputs.fields_of("trace") if i.field is not None and i.name != "arrival_s"]


@pytest.mark.parametrize("decl", TRACE_NUMBERS, ids=lambda i: i.name)
def test_every_trace_cell_past_its_bounds_names_its_row(tmp_path, decl):
    import json

    for v in inputs.past_bounds(decl.field):
        if isinstance(v, float) and math.isnan(v):
            continue
        row = {"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 10, decl.name: v}
        (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,10\n" + ",".join(str(row[k]) for k in row) + "\n")
        (tmp_path / "w.json").write_text(json.dumps({"trace": "t.csv", "trace_time_scale": "recorded"}))
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["simulate", "--mode", "ar", "--jobs", "1", "--workload", str(tmp_path / "w.json")])
        _one_line(code, err.getvalue(), "t.csv")  # the row and field named, or (past a billion tokens) the request past the model's context
