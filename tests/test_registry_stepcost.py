"""Step cost is a registry (costmodel/stepcost): a new pass-model type is one module and one
registration line, and so is a new per-step cost term (an engine's host overhead); the roofline,
linear and table predictors are its members. Every cache belongs to the profile's resolution."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from costmodel import stepcost
from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from costmodel.modes import get_mode
from costmodel.roofline import Segment
from simulate.steptime import StepPricer
from tests.toy.flat_predictor import FlatPredictor
from tests.toy.host_term import HostTerm

PREFILL = Segment("prefill", 2, 512, 0)
DECODE = Segment("decode_step", 8, 1, 900)


@pytest.fixture
def flat():
    stepcost.register(FlatPredictor())  # the predictor's registration line
    yield
    stepcost.unregister("flat")


def test_registered_predictors():
    assert set(stepcost.predictor_names()) >= {"roofline", "linear", "table"}


def test_a_toy_predictor_prices_the_passes_of_its_model_type(flat):
    p = roofline_profile("h200", "bf16", 0.5)
    pm = p.modes["ar"].pass_models["decode_step"]
    pm.model_type, pm.coef = "flat", {"const": 50.0}
    p.validate()  # the predictor's check accepts it
    assert p.pass_ms("ar", (DECODE,)) == 50.0
    # a pass mixing a flat and a linear kind has no common predictor: refused in one line
    with pytest.raises(UserError, match="mixes model types"):
        p.pass_ms("ar", (PREFILL, DECODE))


def test_an_unregistered_model_type_is_refused():
    p = roofline_profile("h200", "bf16", 0.5)
    p.modes["ar"].pass_models["decode_step"].model_type = "flat"
    with pytest.raises(UserError, match="model_type 'flat'"):
        p.validate()


def test_a_roofline_model_prices_as_the_linear_model_of_its_efficiency():
    linear = roofline_profile("h200", "bf16", 0.4)
    roof = roofline_profile("h200", "bf16", 0.4)
    for m in roof.modes.values():
        for pm in m.pass_models.values():
            pm.model_type = "roofline"
    roof.validate()
    for segs in [(PREFILL,), (DECODE,), (PREFILL, DECODE)]:
        assert roof.pass_ms("ar", segs) == pytest.approx(linear.pass_ms("ar", segs), rel=1e-12)


def test_a_toy_step_term_adds_to_every_engine_step():
    p = roofline_profile("h200", "bf16", 0.5)
    p.engine["toy_host_ms"] = 3.0
    mode = get_mode("ar")
    draws = mode.draw(p, SimpleNamespace(prompt_tokens=np.array([100]), output_tokens=np.array([10])), 0)
    before = StepPricer(p, mode, draws, 0).price(0, 0, 0, (8,), (8 * 900,))
    stepcost.register_term(HostTerm())  # the term's registration line
    try:
        q = roofline_profile("h200", "bf16", 0.5)  # a fresh profile: prices are cached per profile object
        q.engine["toy_host_ms"] = 3.0
        after = StepPricer(q, mode, draws, 0).price(0, 0, 0, (8,), (8 * 900,))
    finally:
        stepcost.unregister_term("toy_host")
    assert after == pytest.approx(before + 3.0e-3)


def test_the_caches_belong_to_the_profile_object_and_are_not_pickled():
    p = roofline_profile("h200", "bf16", 0.5)
    p.pass_ms("ar", (DECODE,))
    assert stepcost.resolve(p) is stepcost.resolve(p)
    assert stepcost.resolve(p).cost("ar").memo
    stepcost.resolve(p).memo("limits")["x"] = 1  # other derived objects live beside the prices
    assert stepcost.resolve(p).memo("limits") == {"x": 1}
    q = pickle.loads(pickle.dumps(p))
    assert "_resolved" not in q.__dict__ and q == p
    assert stepcost.resolve(q) is not stepcost.resolve(p)
