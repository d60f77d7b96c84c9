"""`costmodel simulate -o` writes each point as a `vllm bench serve --save-result` file too (issue 48
item 5), and `costmodel compare-bench` reads it back: a closed loop, replayed request by request at
its clients, is the same simulation, so every figure agrees to the last digit. The console shows
TPOT p50 beside TTFT and E2E."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from costmodel.outputset import MANIFEST
from costmodel.schemas.bench_result import read_results


@pytest.fixture
def simulated(cli, tmp_path):
    out = tmp_path / "sim"
    code, text, err = cli("simulate", "--concurrency", "4", "--requests", "40", "--mode", "ar,mtp", "--hardware", "h200", "-o", str(out))
    assert code == 0, err
    return out, text


def test_each_point_is_a_vllm_bench_file_compare_bench_reads_back(cli, simulated, tmp_path):
    out, _ = simulated
    files = sorted(out.glob("bench_*.json"))
    assert [f.name for f in files] == ["bench_ar_qpsinf_c4_r1.json", "bench_mtp_qpsinf_c4_r1.json"]
    assert {f.name for f in files} <= set(json.loads((out / MANIFEST).read_text())["files"])  # part of the output set
    r = read_results(files[0])[0]  # checked as any vllm bench file is
    assert r["completed"] == 40 and r["max_concurrency"] == 4 and len(r["input_lens"]) == 40 and r["request_rate"] == "inf"
    summary = pd.read_csv(out / "summary.csv").set_index("mode")
    for f in files:
        code, text, err = cli("compare-bench", str(f), "--hardware", "h200", "--csv", str(tmp_path / "cmp.csv"))
        assert code == 0, err
        row = pd.read_csv(tmp_path / "cmp.csv").iloc[0]
        assert row["mode"] == f.name.split("_")[1] and f"mode {row['mode']} (from the file)" in " ".join(text.split())
        for k in ("tok_s", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms"):
            assert row[f"{k}_error"] == pytest.approx(0.0, abs=1e-12), (f.name, k)  # the same requests, clients and seed: the same run
        assert row["finished"] == summary.loc[row["mode"], "requests_finished"]


def test_the_console_prints_tpot_p50(simulated):
    out, text = simulated
    assert "TPOT p50 ms" in text
    summary = pd.read_csv(out / "summary.csv").set_index("mode")
    ar_row = next(line for line in text.splitlines() if line.startswith("│ ar "))
    cells = [c.strip() for c in ar_row.strip("│").split("│")]
    header = next(line for line in text.splitlines() if "TPOT p50 ms" in line)
    names = [c.strip() for c in header.strip("┃").split("┃")]
    assert float(cells[names.index("TPOT p50 ms")]) == pytest.approx(summary.loc["ar", "tpot_ms_p50"], abs=0.05)
