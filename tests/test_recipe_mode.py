"""Recipe: a fourth serving mode with its own pass kind, profile part and per-request state
(tests/toy/burst/), added by exactly the files docs/architecture.md names: the mode's module and
its registration line, its engine's module and its registration line, its pass kind's entry."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from costmodel import roofline
from costmodel.baseline_profile import roofline_profile
from costmodel.modes import ServingMode, mode_names, register, unregister
from costmodel.schemas.profile import Profile
from costmodel.schemas.provenance import profile_provenance, provenance_kinds
from simulate import engines
from simulate.scheduler import Replica
from tests.toy import recipes
from tests.toy.burst import engine as burst_engine
from tests.toy.burst import mode as burst_mode

REGISTRATIONS = (register, engines.register, roofline.register_pass_kind)


@pytest.fixture
def burst():
    roofline.register_pass_kind(burst_mode.BURST_STEP)  # its pass kind's entry
    register(burst_mode.BurstMode())  # the mode's registration line
    engines.register(burst_mode.BurstMode.name, burst_engine.BurstReplica)  # its engine's
    yield
    unregister("burst")
    engines.unregister("burst")
    roofline.unregister_pass_kind(burst_mode.BURST_STEP.name)


def touched() -> set[str]:
    """The files this recipe touched: one line in each registry it called, and a new module where
    each of its modules belongs."""
    homes = {f"costmodel/modes/{burst_mode.BurstMode.name}.py": issubclass(burst_mode.BurstMode, ServingMode),
             f"simulate/engines/{burst_mode.BurstMode.name}.py": issubclass(burst_engine.BurstReplica, Replica)}
    return {f for f, ok in homes.items() if ok} | {recipes.registry_file(f) for f in REGISTRATIONS}


def test_the_mode_recipe_touches_exactly_the_files_the_doc_names():
    assert touched() == recipes.recipe_files("A serving mode", mode="burst")
    # the mode module is vocabulary: it imports no stage (its engine is the simulator's)
    assert not recipes.imported_packages(burst_mode) & {"measure", "simulate", "reports"}


def test_a_fourth_mode_with_its_own_pass_kind_part_and_request_state_runs(burst, cli, tmp_path):
    assert mode_names()[-1] == "burst"
    profile = roofline_profile("h200", "bf16", 0.33)  # its part at its published prior
    path = tmp_path / "p.json"
    profile.save(path)
    doc = json.loads(path.read_text())
    assert list(doc)[list(doc).index("modes") + 1:][:3] == ["commit_stats", "mtp_acceptance", "burst_steps"]
    assert Profile.load(path).burst_steps["dist"].values == [0.0, 100.0]
    prov = profile_provenance(profile, modes={"burst"})  # what plan.json and the reports say of it
    assert prov["burst_steps"]["mean_steps"] == 50.0 and provenance_kinds(prov)["published"] == ["burst steps"]

    sim = tmp_path / "sim"
    code, _, err = cli("simulate", "--profile", str(path), "--mode", "ar,burst", "--qps", "2", "--duration", "60", "--jobs", "1", "-o", str(sim))
    assert code == 0, err
    s = pd.read_csv(sim / "summary.csv").set_index("mode")
    assert s.loc["burst", "stable"] and "batch_burst_step_seqs" in s.columns
    assert s.loc["burst", "engine_steps"] < 0.9 * s.loc["ar", "engine_steps"]  # half the requests keep 2 tokens for 100 steps
    assert "burst: published" in s.loc["burst", "provenance"]
    assert cli("report", str(sim), "-o", str(tmp_path / "sim.csv"))[0] == 0


def test_its_engine_keeps_each_requests_burst_in_request_state(burst):
    from types import SimpleNamespace

    from simulate.request import Request

    rep = burst_engine.BurstReplica.__new__(burst_engine.BurstReplica)
    rep.plan = SimpleNamespace(burst=[3])
    r = Request(0, 0.0, 10, 20)
    assert rep._steps_for(r, 20) == 3 + 14  # 3 steps of two tokens, then one a step
    rep._advance(r, 2)
    assert r.state == 2 and rep._tokens_after(r, 3) == 2 + 2  # one burst step left
