"""Recipe: a new pass kind is its entry in PASS_KINDS (costmodel/roofline.py) and the mode module
that runs it. Everything else reads the entry's fields: the roofline's bytes and FLOPs, a pass
model's features, the natural query tokens, the step recorder's columns. Here the toy pair mode
(tests/toy/pair_mode.py, an existing mode for this recipe) runs its decode as a new kind."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from costmodel import roofline
from costmodel.baseline_profile import roofline_profile
from costmodel.hardware import get_hardware
from costmodel.models import get_model
from costmodel.modes import register, unregister
from costmodel.precision import get_precision
from costmodel.roofline import PASS_KINDS, PassKind, Roofline, Segment, default_tokens
from simulate import engines
from tests.toy import recipes
from tests.toy.pair_mode import PairMode, PairReplica

# the entry: a decode pass whose second token only feeds the KV (logits for the last token)
PAIR_STEP = PassKind("pair_step", "target", True, "last", "causal", doc="two tokens per sequence, logits for the last", sampler="token",
                     recorded_as="decode")


class PairStepMode(PairMode):  # the edit to the mode module that runs it
    pass_kinds = ("prefill", PAIR_STEP.name)
    group_kinds = (PAIR_STEP.name,)


@pytest.fixture
def pair_step():
    roofline.register_pass_kind(PAIR_STEP)
    register(PairStepMode())
    engines.register(PairStepMode.name, PairReplica)
    yield
    unregister(PairStepMode.name)
    engines.unregister(PairStepMode.name)
    roofline.unregister_pass_kind(PAIR_STEP.name)


def test_the_pass_kind_recipe_touches_exactly_the_files_the_doc_names():
    touched = {recipes.registry_file(roofline.register_pass_kind), f"costmodel/modes/{PairStepMode.name}.py"}
    assert touched == recipes.recipe_files("A pass kind", mode=PairStepMode.name)


def test_the_roofline_reads_the_entrys_fields_not_its_name(pair_step):
    roof = Roofline(get_model("gemma4-26b-a4b"), get_hardware("h200"), get_precision("bf16"))
    twin = dataclasses.replace(PASS_KINDS["decode_step"], logits="last")  # decode with last-token logits, under its own name
    roofline.register_pass_kind(dataclasses.replace(twin, name="twin_step"))
    try:
        a = roof.pass_cost(Segment(PAIR_STEP.name, 8, 2, 1000))
        b = roof.pass_cost(Segment("twin_step", 8, 2, 1000))
    finally:
        roofline.unregister_pass_kind("twin_step")
    assert a.roofline_ms == b.roofline_ms and a.flops == b.flops
    assert roof.pass_cost(Segment(PAIR_STEP.name, 8, 2, 1000)).flops < roof.pass_cost(Segment("decode_step", 8, 2, 1000)).flops
    assert default_tokens(PAIR_STEP.name, get_model("gemma4-26b-a4b"), 512, 4) == 1


def test_a_mode_running_the_new_kind_simulates(pair_step, cli, tmp_path):
    profile = roofline_profile("h200", "bf16", 0.33)
    assert set(profile.modes["pair"].pass_models) == {"prefill", PAIR_STEP.name}
    path = tmp_path / "p.json"
    profile.save(path)
    sim = tmp_path / "sim"
    code, _, err = cli("simulate", "--profile", str(path), "--mode", "pair", "--qps", "2", "--duration", "30", "--jobs", "1", "-o", str(sim))
    assert code == 0, err
    assert "batch_pair_step_seqs" in pd.read_csv(sim / "summary.csv").columns
