"""What prices a pass and an engine step: the two protocols of step cost and their registries.

- A `PassPredictor` prices one forward pass from the pass models of its segments' kinds; the
  profile's `PassCostModel.model_type` names the predictor (registered under that name). One that
  cannot price a model on this GPU and precision (a table composed for another GPU) hands it to
  its `fallback`.
- A `StepTerm` adds its own milliseconds to every engine step of a mode (a per-step cost that is no
  forward pass, e.g. an engine's host work), reading what it needs from the profile.

Adding either is one module and one registration line in costmodel/stepcost/__init__.py. The
registries live here, below the modules that fill them, so a predictor can name its fallback.
"""

from __future__ import annotations

from typing import Protocol

from costmodel.registry import Registry
from costmodel.roofline import Segment


class PassPredictor(Protocol):
    """Prices one forward pass of the pass models of one `model_type`."""

    name: str  # the model_type it prices
    fallback: str | None  # the predictor of a model this one cannot price here (None: it prices every model)
    # whether a model's coef are a linear model on roofline features, which profile validation holds above
    # the roofline on the model's support (False: the model is no such sum, or is floored as it was fitted)
    linear_above_roofline: bool
    # the coefficient names its models take, which profile validation accepts (optional; absent or None:
    # the roofline features, costmodel/stepcost/linear.py FEATURES); `check` holds a model to them
    coefficients: tuple[str, ...] | None

    def check(self, pm, where: str) -> None:
        """Refuse (UserError) a pass model this predictor could not price."""

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        """Whether it prices `pm` on this GPU and precision."""

    def pass_ms(self, cost, models: list, segments: tuple[Segment, ...]) -> float:
        """Milliseconds of one forward pass over `segments` (models[i] is segments[i]'s pass model;
        `cost` the mode's ModeCost, with its roofline), never below the pass's roofline."""


class StepTerm(Protocol):
    """A per-step cost beside the forward passes."""

    name: str

    def step_ms(self, cost, prefill: Segment | None, groups: tuple[Segment, ...], draws) -> float:
        """Milliseconds this term adds to one engine step (0 where the profile does not carry it)."""


_PREDICTORS: Registry[PassPredictor] = Registry("pass model type")
_TERMS: Registry[StepTerm] = Registry("step term")

register = _PREDICTORS.register  # add a pass predictor under its name (a new `model_type`)
unregister = _PREDICTORS.unregister
get_predictor = _PREDICTORS.get_member
register_term = _TERMS.register  # add a step term: every engine step of every mode is priced with it from then on
unregister_term = _TERMS.unregister


def predictor_names() -> tuple[str, ...]:
    return tuple(_PREDICTORS)


def step_terms() -> tuple[StepTerm, ...]:
    return tuple(_TERMS.values())
