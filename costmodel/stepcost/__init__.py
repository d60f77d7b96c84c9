"""Step cost: what a forward pass and an engine step cost on a profile.

    Replica.schedule -> StepPricer (simulate/steptime.py, step-shape cache)
      -> ModeCost.step_ms -> ServingMode.step_ms (the mode's passes) + step terms
      -> ModeCost.pass_ms (pass memo) -> the pass model's predictor (roofline | linear | table | engine-step)

`resolve(profile)` builds the profile's objects and owns every cache (resolved.py). The
predictors and step terms are registries (base.py): a new pass-model type or per-step cost term is
one module here plus one registration line below."""

from __future__ import annotations

from costmodel.stepcost.base import (PassPredictor, StepTerm, get_predictor, predictor_names, register, register_term, step_terms, unregister,
                                     unregister_term)
from costmodel.stepcost.engine_step import EngineStepPredictor
from costmodel.stepcost.host_overhead import HostOverheadTerm
from costmodel.stepcost.linear import LinearPredictor
from costmodel.stepcost.resolved import ModeCost, ResolvedProfile, pass_cost, resolve
from costmodel.stepcost.roofline import RooflinePredictor
from costmodel.stepcost.table import TablePredictor

# ---- the registered predictors: one line each -------------------------------------------------
register(LinearPredictor())
register(TablePredictor())
register(RooflinePredictor())
register(EngineStepPredictor())
# ---- the registered step terms: one line each ------------------------------------------------
register_term(HostOverheadTerm())

__all__ = ["ModeCost", "PassPredictor", "ResolvedProfile", "StepTerm", "get_predictor", "pass_cost", "predictor_names", "register",
           "register_term", "resolve", "step_terms", "unregister", "unregister_term"]
