"""`costmodel simulate` end to end (in-process): the table, the files, and one-line errors (exit 2)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from costmodel.schemas.results import REQUEST_COLUMNS


def test_simulate_runs_on_the_shipped_profile_with_no_other_flags(cli):
    code, out, err = cli("simulate", "--qps", "1,4", "--mode", "diffusion,ar,mtp", "--hardware", "h200", "--requests", "60", "--jobs", "1")
    assert code == 0, err
    for word in ("diffusion", "ar", "mtp", "TTFT p95 ms", "E2E p99 ms", "busy", "stable"):
        assert word in out


def test_simulate_writes_parquet_summary_csv_and_json(cli, tmp_path):
    out_dir = tmp_path / "sim"
    code, out, err = cli("simulate", "--qps", "1,2", "--mode", "ar,diffusion", "--requests", "80", "--seed", "3", "--replicas", "2",
                         "--router", "round-robin", "--max-num-seqs", "6", "-o", str(out_dir), "--jobs", "2")
    assert code == 0, err
    summary = pd.read_csv(out_dir / "summary.csv")
    assert len(summary) == 4 and {"ttft_ms_p95", "e2e_ms_p99", "stable", "gpu_busy_frac", "batch_denoise_step_seqs"} <= set(summary.columns)
    assert (summary.replicas == 2).all() and (summary["max_num_seqs"] == 6).all() and (summary.router == "round-robin").all()
    doc = json.loads((out_dir / "summary.json").read_text())
    assert len(doc["points"]) == 4 and doc["hardware"] == "h200"
    df = pd.read_parquet(out_dir / "requests_ar_qps2_r2.parquet")
    assert list(df.columns) == list(REQUEST_COLUMNS) and len(df) == 80 and set(df.replica) == {0, 1}
    assert not list(out_dir.glob(".*"))  # no temp files left behind


def test_unstable_points_show_no_latency(cli):
    code, out, err = cli("simulate", "--qps", "150", "--mode", "diffusion", "--duration", "60", "--jobs", "1")
    assert code == 0, err
    assert "NO" in out and "unstable" in out


def test_recorded_trace_needs_no_qps(cli, tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n1,200,30\n3,50,10\n")
    (tmp_path / "w.json").write_text(json.dumps({"trace": "t.csv", "trace_time_scale": "recorded"}))
    code, out, err = cli("simulate", "--mode", "ar", "--workload", str(tmp_path / "w.json"), "--jobs", "1")
    assert code == 0, err
    assert "0.666667" in out  # the trace's own rate: 2 gaps over 3 s


@pytest.mark.parametrize("args,match", [
    (["--qps", "0"], "--qps"),
    (["--qps", "-2"], "--qps"),
    (["--qps", "fast"], "not a number"),
    (["--qps", "1,1"], "twice"),
    ([], "--qps is missing"),
    (["--qps", "1", "--mode", "beam"], "unknown mode 'beam'"),
    (["--qps", "1", "--mode", "ar,ar"], "twice"),
    (["--qps", "1", "--hardware", "tpu9"], "tpu9"),
    (["--qps", "1", "--profile", "/nonexistent/p.json"], "does not exist"),
    (["--qps", "1", "--replicas", "0"], "--replicas"),
    (["--qps", "1", "--seed", "-1"], "--seed"),
    (["--qps", "1", "--requests", "10", "--duration", "5"], "not both"),
    (["--qps", "1", "--duration", "-5"], "--duration"),
    (["--qps", "1", "--max-num-seqs", "0"], "--max-num-seqs 0 is below its bound of 1"),
    (["--qps", "1", "--mode", "diffusion", "--max-num-batched-tokens", "100"], "canvas_length 256 does not fit"),
    (["--qps", "1", "--mode", "diffusion", "--max-num-seqs", "100"], "the largest max_num_seqs that fits is"),  # sampler buffers
    (["--qps", "1", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization 1.5 is above its bound of 1"),
    (["--qps", "1", "--gpu-memory-utilization", "0.05"], "GB for weights"),  # 7 GB: less than the weights at any precision
    (["--qps", "1", "--warmup", "1"], "--warmup"),
    (["--qps", "1", "--jobs", "0"], "--jobs"),
    (["--qps", "1", "--workload", "/nonexistent/w.json"], "does not exist"),
])
def test_bad_input_is_a_one_line_error(cli, args, match):
    code, out, err = cli("simulate", "--requests", "5", *args) if "--duration" not in args and "--requests" not in args else cli("simulate", *args)
    assert code == 2, (out, err)
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_files_are_one_line_errors(cli, tmp_path):
    bad_profile = tmp_path / "p.json"
    bad_profile.write_text('{"schema_version": 1, "modes": {}}')
    wl = tmp_path / "w.json"
    wl.write_text('{"arrival": "poisson", "prompt_tokens": {"dist": "lognormal"}}')
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    for args, match in [(["--profile", str(bad_profile)], "not a valid costmodel profile"), (["--workload", str(wl)], "needs \"median\""),
                        (["--workload", str(not_json)], "not valid JSON"), (["--profile", str(not_json)], "not valid JSON")]:
        code, out, err = cli("simulate", "--qps", "1", "--requests", "5", *args)
        assert code == 2 and match in err and err.count("\n") == 1, (args, err)


def test_profile_for_another_gpu_conflicts_with_hardware(cli, tmp_path):
    from costmodel.baseline_profile import roofline_profile

    p = tmp_path / "h100.json"
    roofline_profile("h100-sxm", "bf16", 0.4).save(p)
    code, out, err = cli("simulate", "--qps", "1", "--requests", "5", "--profile", str(p), "--hardware", "h200")
    assert code == 2 and "not --hardware h200" in err
    code, out, err = cli("simulate", "--qps", "1", "--requests", "20", "--profile", str(p), "--mode", "ar", "--jobs", "1")
    assert code == 0 and "h100-sxm" in out
