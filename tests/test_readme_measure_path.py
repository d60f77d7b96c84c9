"""The README's measure -> fit -> plan, on what `costmodel measure --engine vllm` wrote on a lent H200
(data/runs/engine/h200-fp8-mtp-measure: `costmodel measure --engine vllm --mode mtp --precision fp8 --setups
b2048-s64 --budget-s 95 -o runs/mtp`, 2026-11-29): the fit takes the run folder as the README's glob gives it,
needs no --hardware (the manifest names the catalog GPU), and a plan runs on a profile of one mode."""

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from costmodel.cli import cli

RUN = Path(__file__).resolve().parents[1] / "data/runs/engine/h200-fp8-mtp-measure"


def test_measure_writes_setups_only_and_the_catalog_gpu(tmp_path):
    manifest = json.loads((RUN / "b2048-s64" / "manifest.json").read_text())
    assert manifest["hardware"] == "h200" and manifest["precision"] == "fp8"
    assert sorted(p.name for p in RUN.iterdir() if p.is_dir()) == ["b2048-s64"]  # no models/ beside the setups


def test_fit_then_plan_as_the_readme_prints_them(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / "mtp", ignore=shutil.ignore_patterns("*.log"))
    monkeypatch.chdir(tmp_path)
    setups = [str(p) + "/" for p in sorted(runs.glob("*/*/"))]  # what the shell makes of `runs/*/*/`
    fit = CliRunner().invoke(cli, ["fit", *setups, "--behaviour", "prior", "-o", "mine.json"])
    assert fit.exit_code == 0, fit.output
    profile = json.loads(Path("mine.json").read_text())
    assert profile["hardware"]["id"] == "h200" and profile["commit_stats"]  # the default workload's answer lengths
    plan = CliRunner().invoke(cli, ["plan", "--profile", "mine.json", "--hardware", "h200", "--qps", "5", "-o", "out/mine"])
    assert plan.exit_code == 0, plan.output
    assert "At 5 QPS:" in plan.output and "h200" in plan.output
