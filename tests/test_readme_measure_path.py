"""The README's measure -> fit -> plan, on what `costmodel measure --engine vllm` wrote on a lent machine of two
H200s (data/runs/engine/h200-fp8-mtp-gpus01: `costmodel measure --engine vllm --mode mtp --precision fp8 --gpus 0,1
--setups b2048-s64,k2-a0.6 --budget-s 150 -o runs/mtp`, 2026-11-29, then the README's fit and plan as printed, on that
machine: readme-path.log, readme-path2.log): the two setups ran at once, one engine per GPU; the fit takes the run
folder as the README's glob gives it, needs no --hardware (the manifests name the catalog GPU), and a plan runs on a
profile of one mode."""

import json
from datetime import datetime
import shutil
from pathlib import Path

from click.testing import CliRunner

from costmodel.cli import cli

RUN = Path(__file__).resolve().parents[1] / "data/runs/engine/h200-fp8-mtp-gpus01"


def test_measure_writes_setups_only_and_the_catalog_gpu(tmp_path):
    for setup in ("b2048-s64", "k2-a0.6"):
        manifest = json.loads((RUN / setup / "manifest.json").read_text())
        assert manifest["hardware"] == "h200" and manifest["precision"] == "fp8"  # recorded at run time, no amend step
    assert sorted(p.name for p in RUN.iterdir() if p.is_dir() and p.name != "plan-out") == ["b2048-s64", "k2-a0.6"]  # no models/


def _span_s(setup: str) -> tuple[float, float]:
    manifest = json.loads((RUN / setup / "manifest.json").read_text())
    return datetime.fromisoformat(manifest["started_at"]).timestamp(), datetime.fromisoformat(manifest["finished_at"]).timestamp()


def test_the_two_gpus_recorded_their_setups_at_the_same_time():
    log = (RUN / "readme-path.log").read_text()
    assert "GPU 0: mtp b2048-s64" in log and "GPU 1: mtp k2-a0.6" in log
    (a0, a1), (b0, b1) = _span_s("b2048-s64"), _span_s("k2-a0.6")
    assert max(a0, b0) < min(a1, b1)  # the loads of both engines overlapped in time
    assert "exit 0" in log.split("$ costmodel fit")[0]


def test_fit_then_plan_as_the_readme_prints_them(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / "mtp", ignore=shutil.ignore_patterns("*.log", "gpus.csv", "mine.json", "plan-out"))  # without what the device call added
    monkeypatch.chdir(tmp_path)
    setups = [str(p) + "/" for p in sorted(runs.glob("*/*/"))]  # what the shell makes of `runs/*/*/`
    fit = CliRunner().invoke(cli, ["fit", *setups, "--behaviour", "prior", "-o", "mine.json"])
    assert fit.exit_code == 0, fit.output
    profile = json.loads(Path("mine.json").read_text())
    assert profile["hardware"]["id"] == "h200" and profile["commit_stats"]  # the default workload's answer lengths
    plan = CliRunner().invoke(cli, ["plan", "--profile", "mine.json", "--hardware", "h200", "--qps", "5", "-o", "out/mine"])
    assert plan.exit_code == 0, plan.output
    assert "At 5 QPS:" in plan.output and "h200" in plan.output
