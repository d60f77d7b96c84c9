"""Predicted vs measured for a `vllm bench serve --save-result` file (`costmodel compare-bench`) and for
loads given explicitly (`simulate.compare.compare_loads`): each figure computed as vllm bench computes it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from costmodel.errors import UserError
from costmodel.shipped import resolve_profile
from simulate.calibrate import Batch1Figure, predicted_tok_s
from simulate.compare import MeasuredLoad, bench_figures, compare_loads


@pytest.fixture(scope="module")
def h200():
    return resolve_profile(None, "h200")


def bench_file(path, **fields) -> str:
    """A `vllm bench serve --save-result` result as vLLM writes one (the fields this test needs)."""
    doc = {"date": "20261127-120000", "backend": "vllm", "model_id": "gemma4-26b-a4b", "num_prompts": 24, "request_rate": "inf",
           "burstiness": 1.0, "max_concurrency": 4, "duration": 30.0, "completed": 24, "failed": 0, "total_input_tokens": 24 * 512,
           "total_output_tokens": 24 * 128, "request_throughput": 0.8, "output_throughput": 100.0, "mean_ttft_ms": 50.0,
           "median_ttft_ms": 50.0, "p99_ttft_ms": 80.0, "median_tpot_ms": 10.0, "median_itl_ms": 10.0, "median_e2el_ms": 1300.0, **fields}
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_bench_file_round_trips_through_the_comparison(cli, h200, tmp_path):
    """The simulator's own figures written as a bench file compare at 0% error: the file's load
    (closed loop of 4 clients, 24 requests of 512/128 tokens) is simulated as it was run."""
    load = MeasuredLoad("closed", [512] * 24, [128] * 24, concurrency=4)
    pred = compare_loads(h200, "ar", [load])[0]
    assert pred.finished == 24 and math.isnan(pred.error("tok_s"))  # nothing measured: no error
    f = bench_file(tmp_path / "ar-c4.json", output_throughput=pred.tok_s, median_ttft_ms=pred.ttft_p50_ms, p95_ttft_ms=pred.ttft_p95_ms,
                   median_tpot_ms=pred.tpot_p50_ms)
    code, out, err = cli("compare-bench", f, "--mode", "ar", "--hardware", "h200", "--csv", str(tmp_path / "cmp.csv"))
    assert code == 0, err
    assert "closed loop, 4 clients, no rate limit; 24 requests, prompt 512, output 128 tokens" in " ".join(out.split())
    for label in ("output tok/s", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms"):
        assert label in out
    row = pd.read_csv(tmp_path / "cmp.csv").iloc[0]
    for k in ("tok_s", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms"):
        assert row[f"{k}_error"] == pytest.approx(0.0, abs=1e-9), k
    assert row["mode"] == "ar" and row["kind"] == "closed" and row["concurrency"] == 4


def test_a_file_without_p95_says_so_and_compares_the_rest(cli, tmp_path):
    code, out, err = cli("compare-bench", bench_file(tmp_path / "b.json"), "--mode", "ar", "--hardware", "h200")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "not in file" in out and "TTFT p95: not in the bench file" in flat
    assert "mode ar (--mode)" in flat and "%" in out


def test_a_file_whose_counters_do_not_settle_the_mode_asks_for_it(cli, tmp_path):
    """A Gemma-4 file without spec_decode_* keys may be AR or an MTP server that saved no counters:
    one line asking for --mode, never a guess (a guess of AR put a published MTP figure -47.6% off)."""
    code, out, err = cli("compare-bench", bench_file(tmp_path / "b.json"), "--hardware", "h200")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "do not say which mode" in err and "pass --mode ar or --mode mtp" in err
    f = bench_file(tmp_path / "mtp.json", spec_decode_num_drafts=100, spec_decode_draft_tokens=400, spec_decode_accepted_tokens=250)
    code, out, err = cli("compare-bench", f, "--hardware", "h200")
    assert code == 0, err
    assert "mode mtp (from the file)" in " ".join(out.split())  # its counters settle it


def test_a_published_mtp_figure_is_mtp_by_its_transcribed_server():
    from pathlib import Path

    from costmodel.schemas.bench_result import read_results, settled_mode

    published = Path(__file__).resolve().parents[1] / "data" / "published" / "vllm-blog-2026-06-10"
    found = {name: settled_mode(read_results(published / f"{name}.json"), read_results(published / f"{name}.json")[0]["model_id"])
             for name in ("ar", "mtp", "diffusion")}
    assert found == {"ar": None, "mtp": "mtp", "diffusion": "diffusion"}  # AR's server names no drafting: --mode asked for


def test_rate_burstiness_and_per_request_lengths_are_the_files(cli, tmp_path):
    """A Poisson-rate file with --save-detailed lengths: simulated at its rate and burstiness, request by
    request; a failed request is not simulated."""
    f = bench_file(tmp_path / "rate.json", request_rate=2.0, burstiness=0.5, max_concurrency=None, num_prompts=6, completed=5, failed=1,
                   input_lens=[100, 200, 300, 400, 500, 600], output_lens=[10, 20, 0, 40, 50, 60], errors=["", "", "timeout", "", "", ""],
                   ttfts=[0.1] * 6, itls=[[0.01]] * 6)
    code, out, err = cli("compare-bench", f, "--mode", "mtp", "--hardware", "h200", "--csv", str(tmp_path / "c.csv"))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "2 req/s, gamma gaps of shape (burstiness) 0.5; 5 requests, prompt 100-600 (mean 360), output 10-60 (mean 36) tokens" in flat
    assert "1 request(s) failed in the benchmark and are not simulated" in flat and "mode mtp (--mode)" in flat
    assert pd.read_csv(tmp_path / "c.csv").iloc[0].kind == "poisson"


def test_closed_loop_of_one_is_the_calibration_s_concurrency_1(h200):
    """At one client a request is sent when the previous finishes: output tok/s = tokens / sum of
    E2E, the figure simulate/calibrate.py fits the engine step term to."""
    row = compare_loads(h200, "ar", [MeasuredLoad("closed", [1024] * 8, [1024] * 8, concurrency=1, tok_s=190.0)])[0]
    tok_s, overlap = predicted_tok_s(h200, Batch1Figure("ar", 1024, 1024, 190.0, "test"), None, n_requests=8)
    assert not overlap and row.tok_s == pytest.approx(tok_s, rel=1e-9)
    assert row.error("tok_s") == pytest.approx(row.tok_s / 190.0 - 1)


def test_open_loads_take_given_arrival_times_or_a_rate(h200):
    given = MeasuredLoad("poisson", [256] * 5, [64] * 5, arrival_s=[0.0, 0.0, 5.0, 10.0, 10.5], label="given")
    at_rate = MeasuredLoad("poisson", [256] * 40, [64] * 40, rate=4.0, burstiness=0.25, label="rate")
    capped = MeasuredLoad("poisson", [256] * 40, [64] * 40, rate=4.0, burstiness=0.25, concurrency=1, label="capped")
    rows = compare_loads(h200, "diffusion", [given, at_rate, capped], seed=2)
    assert [r.finished for r in rows] == [5, 40, 40]
    assert rows[0].duration_s > 10.5
    # vllm bench scales the drawn gaps so that the last request is sent at n / rate (10 s here)
    assert rows[1].duration_s == pytest.approx(10.0, abs=2.0)
    # where batching is cheap (AR) one client at a time can only be slower; DiffusionGemma's canvases
    # batched past the CUDA graphs cost more than one after another (3 canvases: 53 ms a step against 3 x 14)
    free, one = compare_loads(h200, "ar", [at_rate, capped], seed=2)
    assert one.duration_s > free.duration_s


def test_tpot_is_vllm_bench_s_median_over_multi_token_requests():
    df = pd.DataFrame({"finished": [True, True, True, False], "finish_s": [1.0, 2.0, 4.0, np.nan], "ttft_ms": [100.0, 200.0, 300.0, np.nan],
                       "e2e_ms": [1000.0, 2000.0, 300.0, np.nan], "output_tokens": [10, 19, 1, 5]})
    fig = bench_figures(df)
    assert fig["tpot_p50_ms"] == pytest.approx(np.median([900 / 9, 1800 / 18]))  # the one-token request has no TPOT
    assert fig["tok_s"] == pytest.approx(30 / 4.0) and fig["finished"] == 3
    assert fig["ttft_p50_ms"] == 200.0 and fig["ttft_p95_ms"] == pytest.approx(290.0)


@pytest.mark.parametrize("load,match", [
    (MeasuredLoad("open", [10], [10], rate=1.0), "kind 'open' is unknown"),
    (MeasuredLoad("closed", [10], [10]), "gives no concurrency"),
    (MeasuredLoad("poisson", [10], [10]), "neither a rate nor arrival_s"),
    (MeasuredLoad("closed", [10, 10], [10], concurrency=2), "2 prompt lengths and 1 output lengths"),
    (MeasuredLoad("closed", [10], [0], concurrency=1), "whole numbers >= 1"),
    (MeasuredLoad("closed", [10], [10], concurrency=2.5), "not a whole number of clients"),
    (MeasuredLoad("poisson", [10, 10], [10, 10], arrival_s=[1.0, 0.5]), "non-decreasing"),
])
def test_bad_loads_are_one_line_errors(h200, load, match):
    with pytest.raises(UserError, match=match):
        compare_loads(h200, "ar", [load])


def test_bad_bench_input_is_one_line(cli, tmp_path):
    no_tok_s = tmp_path / "x.json"
    no_tok_s.write_text(json.dumps({"duration": 5.0, "completed": 3, "total_input_tokens": 30, "total_output_tokens": 30}))
    no_lengths = tmp_path / "y.json"
    no_lengths.write_text(json.dumps({"duration": 5.0, "completed": 3, "output_throughput": 10.0}))
    for args, match in ((["/nonexistent/b.json"], "does not exist"), ([], "no bench file given"), ([str(no_tok_s)], "lacks output_throughput"),
                        ([str(no_lengths)], "lacks total_input_tokens and total_output_tokens"),
                        ([bench_file(tmp_path / "b.json"), "--mode", "beam"], "unknown mode 'beam'")):
        code, out, err = cli("compare-bench", *args, "--hardware", "h200")
        assert code == 2, (args, out, err)
        assert match in err and err.count("\n") == 1 and "Traceback" not in err
