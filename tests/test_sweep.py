"""`costmodel sweep` and the Dask executor: a sweep on a local cluster gives the serial results, a
worker killed mid-sweep loses nothing, a re-run skips finished points, bad input is one line."""

from __future__ import annotations

import json
import os
import signal
import threading

import pandas as pd
import pytest

from costmodel.cli import main
from costmodel.errors import UserError
from simulate.parallel import Workers, run_tasks
from simulate.sweep.run import run_sweep
from simulate.sweep.spec import load_spec, parse_spec

distributed = pytest.importorskip("distributed")

SPEC = {"kind": "simulate", "base": {"hardware": "h200", "duration_s": 15, "slo": "p95_ttft_ms<=1000"},
        "grid": {"mode": ["diffusion", "ar", "mtp"], "qps": [1, 3], "max_num_seqs": [4, 8]}}


def _table(out) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")


def test_a_sweep_on_a_local_cluster_equals_the_serial_run(tmp_path):
    spec = parse_spec(SPEC)
    serial = run_sweep(spec, tmp_path / "serial", Workers(workers=1))
    on_dask = run_sweep(spec, tmp_path / "dask", Workers(workers=2))
    assert serial.ran == on_dask.ran == 12
    pd.testing.assert_frame_equal(_table(tmp_path / "serial"), _table(tmp_path / "dask"))
    assert (tmp_path / "serial" / "results.csv").read_bytes() == (tmp_path / "dask" / "results.csv").read_bytes()


def test_a_worker_killed_mid_sweep_loses_no_finished_point(tmp_path):
    spec = parse_spec({**SPEC, "grid": {**SPEC["grid"], "seed": [0, 1]}})
    expected = run_sweep(spec, tmp_path / "serial", Workers(workers=1)).table
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        pids = list(client.run(os.getpid).values())
        killed = threading.Event()
        finished_before_kill = []

        def progress(done, total):
            if done >= 3 and not killed.is_set():
                killed.set()
                finished_before_kill.extend(p.name for p in (tmp_path / "dask" / "points").iterdir())
                os.kill(pids[0], signal.SIGKILL)

        out = run_sweep(spec, tmp_path / "dask", Workers(address=cluster.scheduler_address), progress)
    finally:
        client.close()
        cluster.close()
    assert killed.is_set() and len(finished_before_kill) >= 3
    assert all((tmp_path / "dask" / "points" / name).exists() for name in finished_before_kill)
    pd.testing.assert_frame_equal(out.table, expected)


def test_a_rerun_skips_finished_points(tmp_path):
    spec = parse_spec(SPEC)
    first = run_sweep(spec, tmp_path, Workers(workers=1))
    (tmp_path / "points" / f"{spec.points[0].point_id}.json").unlink()  # as if interrupted before it finished
    again = run_sweep(spec, tmp_path, Workers(workers=1))
    assert (again.ran, again.skipped) == (1, len(spec.points) - 1)
    pd.testing.assert_frame_equal(again.table, first.table)


def test_plan_sweep_searches_replicas_per_point(tmp_path):
    spec = parse_spec({"kind": "plan", "base": {"hardware": "h200", "mode": "ar", "duration_s": 20, "slo": "p95_ttft_ms<=1000"},
                       "grid": {"qps": [2, 8]}})
    t = run_sweep(spec, tmp_path, Workers(workers=1)).table
    assert list(t["param_qps"]) == [2.0, 8.0]
    assert t["meets_slo"].all() and (t["replicas"] >= 1).all() and (t["evaluations"] >= 1).all()


def test_run_tasks_keeps_input_order_on_dask():
    assert run_tasks(pow, [(2, i) for i in range(6)], cluster=Workers(workers=2)) == [2 ** i for i in range(6)]


def test_yaml_spec_with_inline_workload_fields(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("base: {hardware: h200, mode: ar, qps: 1, n_requests: 50}\ngrid:\n  workload.prompt_tokens: [64, 2048]\n")
    spec = load_spec(f)
    assert [p.params["workload"] for p in spec.points] == [{"prompt_tokens": 64}, {"prompt_tokens": 2048}]
    t = run_sweep(spec, tmp_path / "out", Workers(workers=1)).table
    assert t["prompt_tokens"].iloc[0] < t["prompt_tokens"].iloc[1]


@pytest.mark.parametrize("spec, named", [
    ({"grid": {"qps": [1], "mode": ["ar"], "max_num_seq": [8]}}, "max_num_seq"),
    ({"grid": {"qps": 1, "mode": ["ar"]}}, "grid.qps"),
    ({"base": {"qps": "fast", "mode": "ar"}}, "qps"),
    ({"kind": "search", "base": {"qps": 1, "mode": "ar"}}, "kind"),
    ({"base": {"mode": "ar"}}, "'qps'"),
])
def test_a_malformed_spec_names_the_field(spec, named):
    with pytest.raises(UserError, match=named):
        parse_spec(spec)


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"base": {"qps": 1, "mode": "ar", "max_num_seqs": 0}}))
    assert main(["sweep", str(bad), "-o", str(tmp_path / "o"), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_num_seqs" in err[0]


def test_unreachable_scheduler_names_the_address(tmp_path, capsys):
    good = tmp_path / "s.json"
    good.write_text(json.dumps({"base": {"qps": 1, "mode": "ar", "n_requests": 20}}))
    assert main(["sweep", str(good), "-o", str(tmp_path / "o"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tcp://127.0.0.1:1" in err[0] and "dask scheduler" in err[0]
