"""Issue 39's cases, each as the one line a user now gets: every number has a declared kind and
range (costmodel/fields.py), nothing is rounded, merged or overridden silently, every run is bounded
before it starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.errors import UserError
from costmodel.fields import TOKENS, Field


def test_a_field_names_itself_its_place_and_the_fix():
    with pytest.raises(UserError, match=r"workload w.json: prompt_tokens.min 10.5 is not a whole number of tokens \(it would be rounded\); "
                                        r"give prompt_tokens.min a whole number in \[1, 1e\+09\] tokens"):
        TOKENS.named("prompt_tokens.min").check(10.5, "workload w.json")
    seeds = Field("--seeds", 1, 100, whole=True, override="--max-seeds N")
    with pytest.raises(UserError, match="above its bound of 100.*or pass --max-seeds N to run it"):
        seeds.check(1_000_000)
    assert seeds.check(5.0) == 5 and isinstance(seeds.check(5.0), int)


def _file(tmp_path: Path, name: str, text) -> str:
    p = tmp_path / name
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return str(p)


SIM = ("simulate", "--qps", "2", "--mode", "ar", "--requests", "20", "--jobs", "1")
WORKLOADS = [
    ({"arrival": {"process": "gamma", "cv": 1e300}}, "arrival.cv 1e+300"),
    ({"arrival": {"process": "gamma", "cv": 1e-300}}, "arrival.cv 1e-300"),
    ({"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 1e300}}, "prompt_tokens.sigma 1e+300 is above its bound of 10"),
    ({"output_tokens": {"dist": "uniform", "min": 10.5, "max": 12.5}}, "output_tokens.min 10.5 is not a whole number"),
    ({"sessions": {"turns": 3, "think_s": 1e300}}, "sessions.think_s 1e+300 s is above its bound of 86,400"),
]


@pytest.mark.parametrize("doc, needle", WORKLOADS)
def test_workload_numbers_out_of_their_field_are_one_line(cli, tmp_path, doc, needle):
    code, _, err = cli(*SIM, "--workload", _file(tmp_path, "w.json", json.dumps(doc)))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name, text, args, needle", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, SIM + ("--workload",), "nests brackets deeper"),
    ("tr.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,10\n1e300,10,10\n", ("plan", "--hardware", "h200", "--mode", "ar", "-o", "D",
                                                                            "--load-curve"), "arrival_s spans 1e+300 s (row 2"),
    ("latin1.yaml", "kind: simulate\nbase: {mode: ar, n_requests: 8}\ngrid: {qps: [1]}\n# caf\xe9\n".encode("latin-1"), ("sweep", "-o", "D"),
     "is not UTF-8 text (byte"),
    ("dup.yaml", "kind: simulate\nbase: {mode: ar, n_requests: 8}\ngrid: {qps: [1, 1.0]}\n", ("sweep", "-o", "D"), "grid.qps lists 1.0 twice"),
])
def test_files_that_cannot_be_read_as_given_are_one_line(cli, tmp_path, name, text, args, needle):
    args = tuple(str(tmp_path / "out") if a == "D" else a for a in args)
    code, _, err = cli(*args, _file(tmp_path, name, text))
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("args, needle", [
    (("plan", "--load-curve", "diurnal:peak=10,trough=2,hours=1e300", "--hardware", "h200", "--mode", "ar"), "hours 1e+300 h is above its bound of 744"),
    (("plan", "--load-curve", "flat:5", "--hardware", "h200", "--mode", "ar", "--max-replicas", "0"), "--max-replicas 0 is below its bound of 1"),
    (("plan", "--seeds", "1000000", "--hardware", "h200", "--mode", "ar"), "or pass --max-seeds N to run it"),
    (("plan", "--load-curve", "flat:3000,hours=744", "--hardware", "h200", "--mode", "ar"),  # 744 hours' spans of 150,000 requests each
     "would simulate about 223,200,000 requests (111,600,000 on each of 2 fleets), above the bound of 60,000,000"),
    (("plan", "--load-curve", "flat:30,hours=24", "--hardware", "h200", "--mode", "ar", "--max-requests", "1000"), "above the bound of 1,000"),
    (("plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--max-requests", "1000"), "--max-requests applies to --load-curve only"),
    (("plan", "--qps", "1,1", "--hardware", "h200", "--mode", "ar"), "--qps '1,1' lists 1 twice"),
    (("plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--term", "spot_discount=0.5"), "applies to --pricing spot, not on-demand"),
    (("plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--price", "h200=1e300"), "above its bound of 10,000"),
    (SIM + ("--max-num-batched-tokens", "1"), "max_num_batched_tokens 1 is below max_num_seqs"),
    (SIM + ("--warmup", "0.95"), "a warm-up share of 0.95 leaves"),
])
def test_options_out_of_their_field_are_refused_before_any_run(cli, tmp_path, args, needle):
    code, _, err = cli(*args, *(("-o", str(tmp_path / "out")) if args[0] == "plan" else ()))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_hardware_file_may_repeat_a_catalog_gpu_but_not_redefine_it(cli, tmp_path):
    entry = json.loads(Path("costmodel/data/hardware.json").read_text())["gpus"]["h200"]
    same = _file(tmp_path, "same.json", json.dumps({"gpus": {"h200": entry}}))
    assert cli("roofline", "--hardware", "h200", "--hardware-file", same, "--batch", "1")[0] == 0
    other = _file(tmp_path, "other.json", json.dumps({"gpus": {"h200": {**entry, "memory_gb": 80}}}))
    code, _, err = cli("roofline", "--hardware", "h200", "--hardware-file", other, "--batch", "1")
    assert code == 2 and "redefines the catalog GPU 'h200' (memory_gb differ)" in err


def test_a_nan_pool_price_is_named_not_billed_as_missing(tmp_path):
    from simulate.cluster.fleetfile import load_fleet
    from costmodel.shipped import resolve_profile
    f = _file(tmp_path, "fleet.json", '{"pools": [{"hardware": "h200", "mode": "ar", "price_usd_per_gpu_hour": NaN}]}')
    with pytest.raises(UserError, match="pool 1: price_usd_per_gpu_hour nan is not a number of USD per GPU-hour"):
        load_fleet(f, lambda hw: resolve_profile(None, hw))


def test_a_trace_longer_than_the_day_may_simulate_is_refused_before_it_is_read_whole(tmp_path):
    from simulate.cluster.traces import load_trace
    rows = "".join(f"{i},10,10\n" for i in range(50))
    f = _file(tmp_path, "tr.csv", "arrival_s,prompt_tokens,output_tokens\n" + rows)
    with pytest.raises(UserError, match="holds more than 20 requests, above the bound of 20 requests a day may simulate.*--max-requests N"):
        load_trace(f, max_rows=20)
    assert len(load_trace(f, max_rows=50).arrival_s) == 50
