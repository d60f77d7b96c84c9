"""Adding a serving mode is one module (tests/toy/pair_mode.py: the mode and its engine) plus one
registration line in each registry: every stage after it - the profile, simulate, plan, the CSV and HTML reports - picks it up from the
registry with no other change."""

from __future__ import annotations

import pandas as pd
import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.modes import mode_names, register, unregister
from simulate import engines
from tests.toy.pair_mode import PairMode, PairReplica


@pytest.fixture
def pair_mode():
    register(PairMode())  # the mode's registration line
    engines.register("pair", PairReplica)  # its engine's
    yield
    unregister("pair")
    engines.unregister("pair")


def test_a_toy_mode_runs_through_simulate_plan_and_both_reports(pair_mode, cli, tmp_path):
    assert mode_names()[-1] == "pair"
    profile = roofline_profile("h200", "bf16", 0.33)  # built from the registry: it holds a "pair" mode
    assert set(profile.modes) == {"diffusion", "ar", "mtp", "pair"}
    path = tmp_path / "toy-profile.json"
    profile.save(path)

    sim = tmp_path / "sim"
    code, _, err = cli("simulate", "--profile", str(path), "--mode", "ar,pair", "--qps", "2,4", "--duration", "60", "--jobs", "1", "-o", str(sim))
    assert code == 0, err
    summary = pd.read_csv(sim / "summary.csv").set_index(["mode", "qps"])
    assert summary.loc[("pair", 2.0), "stable"] and summary.loc[("pair", 4.0), "stable"]
    # two tokens per step: the same requests take about half the decode steps of AR
    assert summary.loc[("pair", 2.0), "e2e_ms_p50"] < 0.7 * summary.loc[("ar", 2.0), "e2e_ms_p50"]
    assert "batch_decode_step_seqs" in summary.columns

    plan = tmp_path / "plan"
    code, _, err = cli("plan", "--profile", str(path), "--hardware", "h200", "--mode", "diffusion,ar,pair", "--qps", "2,8",
                       "--duration", "30", "--jobs", "1", "-o", str(plan))
    assert code == 0, err
    rows = pd.read_csv(plan / "plan.csv")
    assert list(dict.fromkeys(rows["mode"])) == ["diffusion", "ar", "pair"]  # registry order
    assert rows[rows["mode"] == "pair"]["replicas"].notna().all()

    for target in ("sim.csv", "sim.html"):
        assert cli("report", str(sim), "-o", str(tmp_path / target))[0] == 0
    assert cli("report", str(plan), "-o", str(tmp_path / "plan.html"))[0] == 0
    assert "pair" in set(pd.read_csv(tmp_path / "sim.csv")["mode"])
    page = (tmp_path / "plan.html").read_text()
    assert "pair" in page and "Crossover" in page
