"""The artefact schemas document their own columns: the data dictionary and docs/metrics.md are
generated from the records' field metadata, so a new column is documented where it is defined."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from costmodel.schemas.dictionary import describe, reference_markdown, write_table
from costmodel.schemas.results import PointSummary, SimulationResults, read_simulation, write_simulation


def test_docs_metrics_md_is_generated_from_the_schemas():
    doc = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
    assert doc.read_text() == reference_markdown(), "regenerate: python -m costmodel.schemas.dictionary > docs/metrics.md"


def test_every_point_summary_column_is_documented():
    s = PointSummary(mode="ar", hardware="h200", profile_id="p", qps=1.0, replicas=1, requests_arrived=1, requests_finished=1,
                     requests_unfinished=0, stable=True, stability_reason="", duration_s=1.0, throughput_rps=1.0, output_tokens_per_s=1.0,
                     total_tokens_per_s=1.0, output_tokens=1, prompt_tokens=1, gpu_busy_frac=0.5, mean_batch_seqs=1.0, mean_batch_tokens=1.0,
                     ttft_ms={"p50": 1.0}, e2e_ms={"p99": 2.0}, batch_composition={"decode_step": 1.0})
    for col in s.flat():
        d = describe(col)
        assert "not described further" not in d.meaning, col
    assert describe("ttft_ms_p50").unit == "ms" and "median" in describe("ttft_ms_p50").meaning
    assert "diffusion = DiffusionGemma" in describe("mode").meaning  # from the mode registry


def test_simulation_results_round_trip(tmp_path):
    class P:  # the profile fields the writer records
        profile_id, hardware, precision = "p", type("Hardware", (), {"id": "h200"})(), "bf16"

    s = PointSummary(mode="ar", hardware="h200", profile_id="p", qps=2.0, replicas=1, requests_arrived=3, requests_finished=3,
                     requests_unfinished=0, stable=True, stability_reason="flat", duration_s=10.0, throughput_rps=0.3,
                     output_tokens_per_s=30.0, total_tokens_per_s=60.0, output_tokens=300, prompt_tokens=300, gpu_busy_frac=0.2,
                     mean_batch_seqs=1.0, mean_batch_tokens=1.0)
    requests = pd.DataFrame({"request_id": [0, 1, 2], "arrival_s": [0.0, 1.0, 2.0], "finish_s": [1.0, 2.0, 3.0], "finished": [True] * 3,
                             "prompt_tokens": [100] * 3, "output_tokens": [100] * 3, "ttft_ms": [50.0] * 3, "e2e_ms": [1000.0] * 3})
    write_simulation(tmp_path, [(s, requests)], P)
    back = read_simulation(tmp_path)
    assert isinstance(back, SimulationResults) and back.points.loc[0, "qps"] == 2.0 and back.meta["hardware"] == "h200"
    assert (tmp_path / "requests_ar_qps2_r1.parquet").exists() and (tmp_path / "bench_ar_qps2_r1.json").exists()


def test_a_table_is_written_with_its_dictionary(tmp_path):
    paths = write_table(pd.DataFrame({"qps": [1.0], "cost_usd_per_month": [10.0]}), tmp_path / "t.csv")
    assert [p.name for p in paths] == ["t.csv", "t.dictionary.csv", "t.dictionary.md"]
    d = pd.read_csv(paths[1])
    assert d.set_index("column").loc["cost_usd_per_month", "unit"] == "USD/month"
