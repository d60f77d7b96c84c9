"""Issue 50's cases, each as the one line a user now gets: a profile is checked like any input
(physical plausibility), options outside their scope or past their field are refused at the edge,
nothing is sorted, merged or reused silently, every run is bounded before it starts."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = json.loads((ROOT / "costmodel/data/profiles/h200.json").read_text())
SIM = ("simulate", "--qps", "1", "--requests", "5", "--jobs", "1")


def _profile(tmp_path: Path, edit) -> str:
    p = copy.deepcopy(SHIPPED)
    edit(p)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(p))
    return str(f)


def _one_line(code, err, *needles):
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


@pytest.mark.parametrize("edit, needle", [
    (lambda p: p["hardware"].update(memory_gb=10, memory_bandwidth_tbps=1), "redefines the catalog GPU 'h200': memory_gb 10.0 (catalog 141.0)"),
    (lambda p: p["hardware"].update(id="h200-small", memory_gb=10), "mode diffusion's fp8 weights take 25.3 GB, more than h200-small's 10 GB"),
    (lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=-1000), "negative intercept const=-1000.0 ms"),
    (lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=1e300), "coefficient const=1e+300 is beyond +-1e+06"),
    (lambda p: [c["content_length"].update(values=[-v for v in c["content_length"]["values"]]) for c in p["commit_stats"].values()],
     "content_length holds -42.0, not a number of tokens >= 0"),
    (lambda p: [c.update(tokens_per_call=0) for c in p["commit_stats"].values()], "tokens_per_call 0.0 is not a positive number of tokens"),
    (lambda p: p["hardware"].update(memory_GB=80), "unknown field(s) memory_GB"),
    (lambda p: [c.update(tokens_per_call=300) for c in p["commit_stats"].values()], "tokens_per_call 300 is more than the 256-token canvas holds"),
])
def test_a_profile_is_checked_like_any_input_by_every_reader(cli, tmp_path, edit, needle):
    f = _profile(tmp_path, edit)
    for args in (("profile", "validate", f), (*SIM, "--mode", "ar", "--profile", f)):
        _one_line(*cli(*args)[::2], needle)


def test_the_shipped_profiles_pass_the_same_checks(cli):
    for f in sorted((ROOT / "costmodel/data/profiles").rglob("*.json")):
        code, out, err = cli("profile", "validate", str(f))
        assert code == 0 and out.startswith("OK"), (f, err)


def test_profile_hardware_is_a_spec_resolved_once():
    from costmodel.hardware import HardwareSpec
    from costmodel.schemas.profile import Profile

    p = Profile.load(ROOT / "costmodel/data/profiles/h200.json")
    assert isinstance(p.hardware, HardwareSpec) and p.hardware.id == "h200" and p.hardware_spec() is p.hardware
    assert Profile.from_dict(p.to_dict()).hardware == p.hardware  # written as the catalog entry's fields, read back the same


@pytest.mark.parametrize("args, needle", [
    (("memory", "--max-model-len", "1000000"), "--max-model-len 1000000 tokens is above its bound of 262,144"),
    (("memory", "--block-size", "7"), "--block-size 7 tokens is below its bound of 16"),
    (("memory", "--block-size", "24"), "--block-size 24 is not a multiple of 16"),
    (("memory", "--mode", "mtp", "--num-speculative-tokens", "100"), "--num-speculative-tokens 100 tokens is above its bound of 16"),
    (("profile", "roofline", "--hardware", "h200", "--efficiency", "1e-300", "-o", "OUT"), "--efficiency 1e-300 is below its bound of 0.001"),
    ((*SIM, "--mode", "diffusion", "--canvas-length", "3"), "canvas_length 3 is not the 256-token canvas"),
    (("plan", "--hardware", "h200", "--mode", "ar", "--load-curve", "flat:2,hours=1", "--startup-s", "1e300", "-o", "OUT"),
     "--startup-s 1e+300 s is above its bound of 3,600"),
    ((*SIM, "--mode", "ar", "--replicas", "100000"), "--replicas 100000 is above its bound of 4,096"),
    (("analyze", "RUN", "--bootstrap", "1000000000000", "-o", "OUT"), "--bootstrap 1000000000000 draws is above its bound of 100,000"),
    (("plan", "--hardware", "h200", "--mode", "ar", "--qps", ",".join(map(str, range(1, 10_001))), "-o", "OUT"),
     "--qps lists 10,000 values, above the bound of 1,000"),
])
def test_limits_hold_in_every_command_before_any_work(cli, tmp_path, args, needle):
    args = [str(tmp_path / "out") if a == "OUT" else str(tmp_path) if a == "RUN" else a for a in args]
    code, _, err = cli(*args)
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_run_of_five_requests_prints_no_p99(cli):
    code, out, err = cli(*SIM, "--mode", "ar")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("│ ar"))
    assert row.count(" - ") >= 3 and "p99: 100" in " ".join(out.split())  # p95 and p99 cells blank, and a line saying why


def _write(tmp_path: Path, name: str, text) -> str:
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return str(p)


def test_files_read_as_given_or_refused_naming_the_place(cli, tmp_path):
    loop = tmp_path / "loop.json"
    os.symlink(loop, loop)
    _one_line(*cli("profile", "validate", str(loop))[::2], "is a symbolic link loop")
    bom = _write(tmp_path, "bom.csv", "\ufefftime_s,qps\n0,2\n3600,2\n".encode("utf-8"))
    code, out, err = cli("plan", "--hardware", "h200", "--mode", "ar", "--load-curve", bom, "--duration", "5", "--jobs", "1", "-o", str(tmp_path / "day"))
    assert code == 0 and "1 x h200" in out, err  # read as the curve it is, not as a trace "in no format read"
    prices = _write(tmp_path, "prices.csv", "hardware,price_usd_per_gpu_hour\n")
    _one_line(*cli("plan", "--hardware", "h200", "--mode", "ar", "--qps", "2", "--price-file", prices, "-o", str(tmp_path / "o"))[::2],
              "holds a header and no GPU")
    bench = _write(tmp_path, "b.json", json.dumps({"duration": 10, "completed": 10**9, "num_prompts": 10**9}))
    _one_line(*cli("compare-bench", bench)[::2], "completed 1000000000 is above its bound of 6e+07")


def test_sweep_spec_values_and_aliases_are_bounded_by_spec_and_point(cli, tmp_path):
    spec = _write(tmp_path, "s.yaml", "kind: plan\nbase: {mode: ar, hardware: h200, slo: 'p95_ttft_ms<=1000'}\ngrid: {qps: [1], max_replicas: [0]}\n")
    _one_line(*cli("sweep", spec, "-o", str(tmp_path / "o"))[::2], "s.yaml: grid.max_replicas: max_replicas 0 is below its bound of 1",
              "give max_replicas a whole number")
    laughs = "kind: simulate\na: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(f"{n}: &{n} [{','.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefg", "bcdefgh"))
    spec = _write(tmp_path, "l.yaml", laughs + "base: {mode: ar, description: *h}\ngrid: {qps: [1]}\n")
    _one_line(*cli("sweep", spec, "-o", str(tmp_path / "o"))[::2], "expands to more than 1,000,000 values through its aliases")


def test_a_trace_times_its_load_scale_is_bounded_before_copies_are_built(tmp_path):
    from costmodel.errors import UserError
    from simulate.cluster.traces import load_trace

    f = _write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i},10,10\n" for i in range(100)))
    with pytest.raises(UserError, match=r"100 requests x --load-scale 1000 would build about 100,000 requests, above the bound of 1,000.*--max-requests N"):
        load_trace(f, rate_scale=1000, max_rows=1000)
