"""Fuzz every command with bad options and bad input files (Hypothesis): each run exits 0 or 2 -
never a traceback - and leaves every file already written as it was, with no temp file behind.

Each command starts from a cheap valid invocation; Hypothesis replaces one to three of its option
values with bad ones (numbers out of range, NaN, empty list items, unwritable or odd paths,
malformed profiles, workloads, traces, run directories, sweep specs and SLO strings).
`pytest -s tests/test_fuzz_cli.py` prints how many inputs were tried and how they ended.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import os
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "costmodel" / "data" / "profiles" / "h200.json"
REAL_RUN = ROOT / "data" / "runs" / "h200-ar-compiled"
EXAMPLES = int(os.environ.get("COSTMODEL_FUZZ_EXAMPLES", "24"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
OUTCOMES: Counter = Counter()  # (command, exit code) over the session
NUMBERS = ["", "-1", "0", "nan", "inf", "-inf", "1e309", "abc", "1,,2", ",", " ", "1e9", "99999999999999999999", "0.5", "☃", "x" * 300]
SLOS = ["", "p95_ttft_ms<=", "p95_ttft_ms<=-5", "p95_ttft_ms<=nan", "p101_e2e_ms<=5", "ttft<=5", "p95_ttft_ms>=5", "p95_ttft_ms<=1000,,",
        "p95_ttft_ms<=1000,p95_ttft_ms<=2000", "p95_e2e_ms<=inf", "p50_tpot_ms<=1e9", "p95_ttft_ms<=1000;p95_e2e_ms<=5000"]


# ---- the workspace: inputs, good and bad, and outputs already written ------------------------------

def _write(p: Path, text: str | bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


def _bad_profiles(d: Path) -> list[str]:
    """The shipped profile with one field broken: negative, NaN, infinite coefficients, a model below
    its roofline, missing or mistyped parts."""
    good = json.loads(SHIPPED.read_text())
    edits = {
        "neg_coef": lambda p: p["modes"]["diffusion"]["pass_models"]["denoise_step"]["coef"].update(roofline_ms=-4.0),
        "nan_coef": lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=float("nan")),
        "inf_coef": lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=float("inf")),
        "below_roofline": lambda p: p["modes"]["diffusion"]["pass_models"]["encoder_commit"].update(coef={"roofline_ms": 0.5}),
        "no_modes": lambda p: p.update(modes={}),
        "bad_hw": lambda p: p["hardware"].update(id="no-such-gpu", memory_gb=-1),
        "str_coef": lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const="fast"),
        "bad_probs": lambda p: [c["content_length"].update(probs=[2.0] * len(c["content_length"]["probs"])) for c in p["commit_stats"].values()],
        "bad_accept": lambda p: p["mtp_acceptance"].update(per_position=[1.5, -1]),
        "schema": lambda p: p.update(schema_version=999),
    }
    out = []
    for name, edit in edits.items():
        p = copy.deepcopy(good)
        edit(p)
        out.append(str(_write(d / f"profile_{name}.json", json.dumps(p))))
    out.append(str(_write(d / "profile_empty.json", "")))
    out.append(str(_write(d / "profile_list.json", "[1, 2]")))
    return out


def _traces(d: Path) -> list[str]:
    return [str(_write(d / name, text)) for name, text in {
        "equal.csv": "arrival_s,prompt_tokens\n" + "5,100\n" * 20,
        "one.csv": "arrival_s,prompt_tokens\n0,10\n",
        "neg.csv": "arrival_s,prompt_tokens\n-1,-5\n2,0\n",
        "text.csv": "arrival_s,prompt_tokens\nnoon,many\n",
        "empty.csv": "arrival_s,prompt_tokens\n",
        "nocols.csv": "a,b\n1,2\n",
        "huge.csv": "arrival_s,prompt_tokens,output_tokens\n0,99999999999,99999999999\n1,1,1\n",
        "bad.jsonl": "{\"arrival_s\": 0, \"prompt_tokens\": 1}\n{not json\n",
        "binary.csv": b"\x00\xff\xfe\x00garbage",
    }.items()]


WORKLOAD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                            st.text(max_size=8), st.just({}), st.just([]), st.sampled_from(["poisson", "constant", "gamma", "regime"]))
WORKLOADS = st.dictionaries(
    st.sampled_from(["arrival", "regime_mix", "prompt_tokens", "output_tokens", "trace", "trace_time_scale", "description", "extra"]),
    st.one_of(WORKLOAD_VALUES, st.dictionaries(st.sampled_from(["dist", "median", "sigma", "min", "max", "value", "values", "probs",
                                                                "process", "cv", "R1", "R9"]), WORKLOAD_VALUES, max_size=4)),
    max_size=4)


def _run_dirs(d: Path) -> list[str]:
    empty = d / "run_empty"
    empty.mkdir()
    _write(d / "run_garbage" / "manifest.json", "{\"kind\": 3, \"mode\": []}")
    _write(d / "run_badjson" / "manifest.json", "{")
    _write(d / "run_passes" / "manifest.json", json.dumps({"run_id": "x", "kind": "gpu", "mode": "ar", "model": "gemma4-26b-a4b"}))
    _write(d / "run_passes" / "passes" / "part-0.parquet", b"not parquet")
    return [str(empty), str(d / "run_garbage"), str(d / "run_badjson"), str(d / "run_passes")]


def _sweep_specs(d: Path) -> list[str]:
    specs = {"empty.json": "", "list.json": "[]", "kind.json": json.dumps({"kind": "nope"}),
             "grid.json": json.dumps({"kind": "simulate", "base": {"requests": -1}, "grid": {"qps": [0, "x"]}}),
             "huge.json": json.dumps({"kind": "simulate", "base": {"mode": "ar", "requests": 10**12}, "grid": {"qps": [1]}}),
             "plan.json": json.dumps({"kind": "plan", "base": {"slo": "p95<=", "duration_s": -5}, "grid": {}}),
             "bad.yaml": "kind: simulate\nbase: [unclosed\n"}
    return [str(_write(d / name, text)) for name, text in specs.items()]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """Inputs and already-written outputs; `pools` maps each kind of input to bad (and a few good) values."""
    root = tmp_path_factory.mktemp("fuzz")
    inputs = root / "inputs"
    done = root / "done"  # outputs of earlier runs: must never change
    assert main(["simulate", "--qps", "2", "--mode", "ar,diffusion", "--requests", "60", "--jobs", "1", "-o", str(done / "sim")]) == 0
    assert main(["report", str(done / "sim"), "-o", str(done / "sim.csv")]) == 0
    ro = _write(inputs / "readonly.csv", "x\n")
    ro.chmod(0o444)
    workloads = [str(_write(inputs / "wl_equal.json", json.dumps({"trace": "equal.csv"})))]
    existing = _write(inputs / "existing.json", "{}\n")  # a writable file: overwriting it is allowed only on success
    # unwritable places (a pseudo filesystem, below a file, a folder, a read-only file) and odd names inside the workspace
    paths = ["/proc/x", f"{ro}/x", str(inputs), str(ro), str(existing), str(root / "☃" / "x y"), str(root / "-")]
    pools = {
        "num": NUMBERS, "slo": SLOS, "path": paths,
        "profile": _bad_profiles(inputs) + [str(SHIPPED), str(inputs / "missing.json")] + paths,
        "trace": _traces(inputs), "workload": workloads + paths, "run": _run_dirs(inputs) + paths,
        "spec": _sweep_specs(inputs) + paths, "results": [str(done / "sim"), str(inputs / "run_empty")] + paths,
        "name": ["h200", "no-such", "", "ar,ar", "diffusion,", "H200", "rtx-5090,h200,,"] + NUMBERS[:6],
    }
    for i, tr in enumerate(pools["trace"]):
        workloads.append(str(_write(inputs / f"wl_trace{i}.json", json.dumps({"trace": Path(tr).name, "trace_time_scale": "qps"}))))
    yield {"root": root, "done": done, "inputs": inputs, "pools": pools, "n": [0]}
    ro.chmod(0o644)
    print("\nfuzz outcomes: " + ", ".join(f"{cmd} exit {code}: {n}" for (cmd, code), n in sorted(OUTCOMES.items(), key=str))
          + f"; {sum(OUTCOMES.values())} inputs, {sum(n for (_, c), n in OUTCOMES.items() if c not in (0, 2))} neither 0 nor 2")


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def run_fuzzed(ws, args: list[str]) -> int:
    """Run `costmodel ARGS` in-process; a traceback fails the test with the arguments that caused it."""
    before = _snapshot(ws["done"]) | _snapshot(ws["inputs"])
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(args)
    except Exception as e:  # noqa: BLE001 - any exception escaping main() is the traceback a user would see
        OUTCOMES[(args[0], "traceback")] += 1
        pytest.fail(f"traceback ({e.__class__.__name__}: {e}) from costmodel {' '.join(args)}")
    OUTCOMES[(args[0], code)] += 1
    assert code in (0, 2), (code, args, err.getvalue()[-500:])
    if code == 2:
        msg = err.getvalue().strip()
        assert msg and "Traceback" not in msg, (args, msg)
    after = _snapshot(ws["done"]) | _snapshot(ws["inputs"])
    named = set(args) if code == 0 else set()  # a successful run may replace the file it was told to write
    assert {k: v for k, v in after.items() if k not in named} == {k: v for k, v in before.items() if k not in named}, \
        f"costmodel {' '.join(args)} changed files already written"
    stray = [p for p in ws["root"].rglob(".*") if p.name.endswith(".tmp") or p.name.startswith(".costmodel-probe")
             or ".costmodel-staging-" in p.name or ".costmodel-old-" in p.name or p.name.endswith(".costmodel-lock")]
    assert not stray, stray
    return code


def _fresh(ws, name: str) -> str:
    ws["n"][0] += 1
    return str(ws["root"] / "out" / f"{ws['n'][0]}" / name)


def mutate(draw, ws, base: list[str], options: dict[str, str]) -> list[str]:
    """`base` with one to three of `options` (flag -> pool name) set to values from their pools."""
    args = list(base)
    chosen = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True))
    for flag in chosen:
        value = draw(st.sampled_from(ws["pools"][options[flag]]))
        if flag in args:
            i = args.index(flag)
            args[i + 1] = value
        elif flag.startswith("ARG"):
            args[int(flag[3:])] = value
        else:
            args += [flag, value]
    return args


# ---- one test per command ---------------------------------------------------------------------------

@FUZZ
@given(data=st.data())
def test_fuzz_simulate(ws, data):
    base = ["simulate", "--qps", "2", "--mode", "ar", "--requests", "20", "--jobs", "1", "-o", _fresh(ws, "sim")]
    opts = {"--qps": "num", "--mode": "name", "--hardware": "name", "--profile": "profile", "--replicas": "num", "--duration": "num",
            "--requests": "num", "--workload": "workload", "--seed": "num", "--max-num-seqs": "num", "--max-num-batched-tokens": "num",
            "--gpu-memory-utilization": "num", "--warmup": "num", "-o": "path", "--jobs": "num", "--router": "name"}
    run_fuzzed(ws, mutate(data.draw, ws, base, opts))


@FUZZ
@given(wl=WORKLOADS)
def test_fuzz_workload_files(ws, wl):
    path = _write(Path(_fresh(ws, "wl.json")), json.dumps(wl))
    run_fuzzed(ws, ["simulate", "--qps", "2", "--mode", "ar", "--requests", "20", "--jobs", "1", "--workload", str(path)])


@FUZZ
@given(data=st.data())
def test_fuzz_plan_and_report(ws, data):
    base = ["plan", "--qps", "2", "--duration", "5", "--hardware", "h200", "--mode", "ar", "--jobs", "1", "--max-replicas", "2",
            "-o", _fresh(ws, "plan")]
    opts = {"--qps": "num", "--slo": "slo", "--hardware": "name", "--mode": "name", "--profile": "profile", "--price": "num",
            "--purchase-usd": "num", "--electricity-usd-per-kwh": "num", "--amortisation-years": "num", "--pue": "num",
            "--telemetry": "run", "--workload": "workload", "--duration": "num", "--seed": "num", "--max-replicas": "num",
            "--refine-crossover": "num", "--jobs": "num", "-o": "path"}
    run_fuzzed(ws, mutate(data.draw, ws, base, opts))
    base = ["report", str(ws["done"] / "sim"), "-o", _fresh(ws, "r.csv")]
    opts = {"ARG1": "results", "-o": "path", "--slo": "slo", "--price": "num", "--pue": "num", "--telemetry": "run",
            "--amortisation-years": "num", "--purchase-usd": "num"}
    run_fuzzed(ws, mutate(data.draw, ws, base, opts))


@FUZZ
@given(data=st.data())
def test_fuzz_catalog_roofline_memory(ws, data):
    base = ["roofline", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200", "--batch", "1", "--csv", _fresh(ws, "r.csv")]
    opts = {"--model": "name", "--hardware": "name", "--precision": "name", "--pass-kind": "name", "--batch": "num", "--tokens": "num",
            "--context": "num", "--draft-tokens": "num", "--csv": "path", "--hardware-file": "profile"}
    run_fuzzed(ws, mutate(data.draw, ws, base, opts))
    run_fuzzed(ws, mutate(data.draw, ws, ["hardware"], {"--hardware-file": "profile"}))
    run_fuzzed(ws, mutate(data.draw, ws, ["memory", "--hardware", "h200"], {"--hardware": "name", "--mode": "name", "--precision": "name",
                                                                             "--context": "num", "--max-num-seqs": "num",
                                                                             "--gpu-memory-utilization": "num"}))


@FUZZ
@given(data=st.data())
def test_fuzz_profiles(ws, data):
    pool = ws["pools"]["profile"]
    run_fuzzed(ws, ["profile", data.draw(st.sampled_from(["validate", "show"])), data.draw(st.sampled_from(pool))])
    base = ["profile", "project", str(SHIPPED), "--hardware", "h100-sxm", "--precision", "bf16", "-o", _fresh(ws, "p.json")]
    run_fuzzed(ws, mutate(data.draw, ws, base, {"ARG2": "profile", "--hardware": "name", "--precision": "name", "-o": "path"}))
    base = ["profile", "roofline", "--hardware", "h200", "--precision", "bf16", "--efficiency", "0.3", "-o", _fresh(ws, "r.json")]
    run_fuzzed(ws, mutate(data.draw, ws, base, {"--hardware": "name", "--precision": "name", "--efficiency": "num", "-o": "path"}))


@settings(FUZZ, max_examples=max(4, EXAMPLES // 3))
@given(data=st.data())
def test_fuzz_run_directories(ws, data):
    """fit, analyze and import-bench on bad run directories and files (the real run once in a while)."""
    runs = ws["pools"]["run"] + [str(REAL_RUN)]
    run_fuzzed(ws, mutate(data.draw, ws, ["fit", str(REAL_RUN), "-o", _fresh(ws, "f.json")],
                          {"ARG1": "run", "-o": "path", "--heldout": "num", "--fill-roofline": "num", "--modes": "name", "--seed": "num"}))
    run_fuzzed(ws, ["analyze", data.draw(st.sampled_from(runs)), "-o", data.draw(st.sampled_from([_fresh(ws, "a")] + ws["pools"]["path"]))])
    run_fuzzed(ws, ["import-bench", data.draw(st.sampled_from(ws["pools"]["spec"] + ws["pools"]["trace"])), "-o", _fresh(ws, "ib")])


@settings(FUZZ, max_examples=max(4, EXAMPLES // 3))
@given(data=st.data())
def test_fuzz_gpu_commands_refuse_without_a_gpu(ws, data):
    """measure and validate need a GPU (or an endpoint): on this machine they must refuse in one line."""
    base = ["measure", "--model", "diffusiongemma-26b-a4b", "--random-weights", "-o", _fresh(ws, "m")]
    run_fuzzed(ws, mutate(data.draw, ws, base, {"--model": "name", "--canvases": "num", "--contexts": "num", "--repeats": "num",
                                                "-o": "path", "--mode": "name", "--draft-tokens": "num"}))
    run_fuzzed(ws, ["measure", "--resume", "-o", data.draw(st.sampled_from([_fresh(ws, "missing")] + ws["pools"]["run"]))])
    base = ["validate", "--profile", str(SHIPPED), "-o", _fresh(ws, "v")]
    run_fuzzed(ws, mutate(data.draw, ws, base, {"--rates": "num", "--mode": "name", "--profile": "profile", "--requests": "num",
                                                "--prompt-tokens": "num", "-o": "path"}))


@settings(FUZZ, max_examples=max(4, EXAMPLES // 3))
@given(data=st.data())
def test_fuzz_sweep_specs(ws, data):
    run_fuzzed(ws, ["sweep", data.draw(st.sampled_from(ws["pools"]["spec"])), "--jobs", "1",
                    "-o", data.draw(st.sampled_from([_fresh(ws, "sw")] + ws["pools"]["path"]))])



# ---- issue 39: every number a user gives has a declared kind and range (costmodel/fields.py) ---------
# Each generator below draws a field and a value from across its edges (fractions where a count is
# meant, values just inside and far outside the range, NaN, infinities, huge integers, strings); the
# run must exit 0 or 2, never trace back, and an accepted value must be one the field accepts as it
# is: a fraction for a count, a value out of range or a repeated list item accepted is a silent change.

EXTREME = st.one_of(st.sampled_from([0, -1, 0.5, 1, 2, 10.5, 12.5, 1e-300, 1e300, 10**30, float("nan"), float("inf"), -float("inf"), 1e9, 1e9 + 1,
                                     86400, 86401, 31.6, 32, 0.03, 5e-324]),
                    st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**12))
# (workload field path as JSON keys, the declared field, a valid rest of the object)
WORKLOAD_FIELDS = [
    (("arrival", "cv"), "GAMMA_CV", {"arrival": {"process": "gamma", "cv": 2}}),
    (("prompt_tokens", "sigma"), "LOGNORMAL_SIGMA", {"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5}}),
    (("prompt_tokens", "median"), "LENGTH_MEDIAN", {"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5}}),
    (("prompt_tokens", "max"), "TOKENS", {"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5, "max": 4000}}),
    (("output_tokens", "min"), "TOKENS", {"output_tokens": {"dist": "uniform", "min": 10, "max": 12}}),
    (("output_tokens", "value"), "TOKENS", {"output_tokens": {"dist": "constant", "value": 10}}),
    (("prompt_tokens",), "TOKENS", {"prompt_tokens": 100}),
    (("sessions", "think_s"), "THINK_S", {"sessions": {"turns": 2, "think_s": 1}}),
    (("sessions", "turns"), "TURNS", {"sessions": {"turns": 2, "think_s": 1}}),
    (("system_prompt", "apps"), "APPS", {"system_prompt": {"tokens": 10, "apps": 2}}),
]


def _accepts(field, value) -> bool:
    """Whether the declared field takes `value` as it is (no rounding, no clipping)."""
    from costmodel.errors import UserError as _UE
    try:
        field.check(value)
        return True
    except _UE:
        return False


CLASSES: Counter = Counter()  # (input class, exit code or "silent change") over the session


@pytest.fixture(scope="module", autouse=True)
def report_classes():
    yield
    if CLASSES:
        print("\ninput classes: " + ", ".join(f"{c} exit {o}: {n}" for (c, o), n in sorted(CLASSES.items(), key=str))
              + f"; {sum(CLASSES.values())} inputs, {sum(n for (_, o), n in CLASSES.items() if o == 'silent change')} silent changes")


def _silent(cls: str, code: int, accepted: bool, args) -> None:
    """A value the field refuses must not run (exit 0); one it takes must not be refused by its bound."""
    CLASSES[(cls, "silent change" if code == 0 and not accepted else code)] += 1
    assert not (code == 0 and not accepted), f"{cls}: costmodel {' '.join(map(str, args))} accepted a value outside its declared field"


@FUZZ
@given(which=st.sampled_from(range(len(WORKLOAD_FIELDS))), value=EXTREME)
def test_fuzz_workload_numbers_are_refused_or_taken_as_given(ws, which, value):
    from costmodel import fields
    path, name, doc = WORKLOAD_FIELDS[which]
    doc = copy.deepcopy(doc)
    d = doc
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    f = _write(Path(_fresh(ws, "wl.json")), json.dumps(doc))
    args = ["simulate", "--qps", "2", "--mode", "ar", "--requests", "12", "--jobs", "1", "--warmup", "0", "--workload", str(f)]
    code = run_fuzzed(ws, args)
    _silent("workload field", code, _accepts(getattr(fields, name), value), args)


CELLS = st.one_of(st.sampled_from(["10.5", "1e300", "-1", "0", "nan", "inf", "", "x", "1e9", "99999999999", "7", "3600"]), st.integers(0, 10**6).map(str))


@FUZZ
@given(col=st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens"]), cell=CELLS, row=st.integers(0, 3),
       day=st.booleans())
def test_fuzz_trace_cells_are_refused_or_taken_as_given(ws, col, cell, row, day):
    """A workload trace (simulate) or a public-format trace (plan --load-curve's reader): a cell out of
    its field is refused naming the row; no token count is rounded."""
    from costmodel.errors import UserError as _UE
    from costmodel.fields import TOKENS
    from simulate.cluster.traces import load_trace as load_public
    rows = [{"arrival_s": str(i), "prompt_tokens": "10", "output_tokens": "10"} for i in range(4)]
    rows[row][col] = cell
    text = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{r['arrival_s']},{r['prompt_tokens']},{r['output_tokens']}\n" for r in rows)
    tr = _write(Path(_fresh(ws, "t.csv")), text)
    token_ok = col == "arrival_s" or (_accepts(TOKENS, cell) if cell not in ("", "x") else False)
    if day:
        try:
            load = load_public(tr)
        except _UE as e:
            CLASSES[("trace (day)", 2)] += 1
            assert "\n" not in str(e)
            return
        CLASSES[("trace (day)", 0)] += 1
        assert (col == "arrival_s" or token_ok or float(cell) < 1) and load.prompt_tokens.dtype.kind == "i", (col, cell)
        return
    wl = _write(tr.with_suffix(".json"), json.dumps({"trace": tr.name}))
    args = ["simulate", "--qps", "2", "--mode", "ar", "--requests", "8", "--jobs", "1", "--warmup", "0", "--workload", str(wl)]
    _silent("trace cell", run_fuzzed(ws, args), token_ok, args)


@FUZZ
@given(kind=st.sampled_from(["flat", "diurnal"]), key=st.sampled_from(["hours", "peak", "trough", "peak_hour", "rate"]), value=EXTREME)
def test_fuzz_load_curve_presets_are_bounded(kind, key, value):
    from costmodel.errors import UserError as _UE
    from simulate.cluster.load import parse_curve
    p = {"peak": 10, "trough": 2, "peak_hour": 14, "hours": 2, "rate": 5}
    p[key] = value
    text = (f"flat:{p['rate']},hours={p['hours']}" if kind == "flat"
            else f"diurnal:peak={p['peak']},trough={p['trough']},peak_hour={p['peak_hour']},hours={p['hours']}")
    try:
        lc = parse_curve(text)
    except _UE as e:
        CLASSES[("load curve", 2)] += 1
        assert "\n" not in str(e)
        return
    CLASSES[("load curve", 0)] += 1
    assert 0 < lc.span_s <= 744 * 3600 and math.isfinite(lc.expected_requests) and lc.peak_qps <= 1e9, text


PRICE_OPTS = [("--price", "h200={}", "PRICE_USD_PER_GPU_HOUR", ()), ("--pue", "{}", "PUE", ()),
              ("--electricity-usd-per-kwh", "{}", "ELECTRICITY_USD_PER_KWH", ("--onprem",)),
              ("--amortisation-years", "{}", "AMORTISATION_YEARS", ("--onprem",)), ("--purchase-usd", "h200={}", "PURCHASE_USD", ("--onprem",))]


@FUZZ
@given(which=st.sampled_from(range(len(PRICE_OPTS))), value=EXTREME, term=st.sampled_from([None, "spot_discount=0.5", "host_usd_per_gpu=1e300",
                                                                                           "upfront_share=2", "reserved_1y_discount=0.3"]))
def test_fuzz_prices_and_terms_are_bounded(ws, which, value, term):
    """Prices, terms and facility numbers re-price a written simulation (`report`, no simulation):
    a value outside its field, or a term the pricing model does not read, is refused."""
    from costmodel import fields
    opt, fmt, name, extra = PRICE_OPTS[which]
    args = ["report", str(ws["done"] / "sim"), "-o", _fresh(ws, "r.csv"), *extra, opt, fmt.format(value)]
    if term:
        args += ["--term", term]
    code = run_fuzzed(ws, args)
    # every drawn term is out of range or read by a model neither on-demand nor onprem is
    _silent("price or term", code, _accepts(getattr(fields, name), value) and term is None, args)


@FUZZ
@given(data=st.data())
def test_fuzz_lists_and_run_sizes(ws, data):
    """Repeated list items and run sizes above their bound are refused before any simulation, the
    refusal naming the option that passes the bound."""
    qps = data.draw(st.lists(st.sampled_from(["1", "2", "1.0", "2"]), min_size=2, max_size=3))
    seeds = data.draw(st.sampled_from(["1", "100", "101", "1000000", "0"]))
    args = ["plan", "--qps", ",".join(qps), "--seeds", seeds, "--hardware", "h200", "--mode", "ar", "--duration", "3",
            "--max-replicas", data.draw(st.sampled_from(["0", "2", "100001"])), "-o", _fresh(ws, "p")]
    repeated = len({float(q) for q in qps}) < len(qps)
    big = int(seeds) > 100 or int(seeds) < 1 or args[args.index("--max-replicas") + 1] != "2"
    if not repeated and not big:
        return  # a valid plan runs minutes under --seeds 100: not this test's subject
    _silent("list or run size", run_fuzzed(ws, args), False, args)


@settings(FUZZ, max_examples=max(4, EXAMPLES // 3))
@given(rate=st.sampled_from(["1e5", "1e9"]), hours=st.sampled_from(["24", "744"]), bound=st.sampled_from([None, "10", "1000000"]),
       trace=st.booleans())
def test_fuzz_day_run_sizes_are_bounded_before_the_day(ws, rate, hours, bound, trace):
    """A day above its run-size bound (a curve's requests over all fleets as its hours' spans simulate them,
    a trace's rows) or whose busiest hour's first span exceeds the memory budget is refused before the
    peak search; nothing is written. (A 3,000 QPS day of 24 spans fits both now: it runs.)"""
    load = f"flat:{rate},hours={hours}"
    if trace:  # a trace of 40 rows, above a --max-requests of 10 (a curve case otherwise)
        load = str(_write(Path(_fresh(ws, "tr.csv")), "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},9,9\n" for i in range(40))))
        bound = "10"
    out = _fresh(ws, "day")
    args = ["plan", "--load-curve", load, "--hardware", "h200", "--mode", "ar", "-o", out, *(["--max-requests", bound] if bound else [])]
    code = run_fuzzed(ws, args)
    _silent("day run size", code, False, args)
    assert code == 2 and not Path(out).exists(), args


@settings(FUZZ, max_examples=max(4, EXAMPLES // 3))
@given(kind=st.sampled_from(["latin1", "nested", "dup_grid", "dup_point", "nan_qps", "fraction_replicas"]))
def test_fuzz_sweep_specs_encodings_nesting_duplicates(ws, kind):
    base = "kind: simulate\nbase: {mode: ar, n_requests: 8, hardware: h200}\n"
    text = {"latin1": (base + "grid: {qps: [1]}\n# caf\xe9\n").encode("latin-1"),
            "nested": "a: " + "[" * 50_000 + "]" * 50_000 + "\n",
            "dup_grid": base + "grid: {qps: [1, 1.0]}\n",
            "dup_point": base + "grid: {qps: [1, 2]}\npoints: [{qps: 2}]\n",
            "nan_qps": base + "grid: {qps: [.nan]}\n",
            "fraction_replicas": base + "grid: {qps: [1], replicas: [1.5]}\n"}[kind]
    spec = _write(Path(_fresh(ws, f"{kind}.yaml")), text)
    args = ["sweep", str(spec), "--jobs", "1", "-o", _fresh(ws, "sw")]
    _silent("sweep spec", run_fuzzed(ws, args), False, args)
