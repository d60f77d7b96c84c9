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

from costmodel.errors import UserError
from costmodel.roofline import Segment


class PassPredictor(Protocol):
    """Prices one forward pass of the pass models of one `model_type`."""

    name: str  # the model_type it prices
    fallback: str | None  # the predictor of a model this one cannot price here (None: it prices every model)

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


_PREDICTORS: dict[str, PassPredictor] = {}
_TERMS: dict[str, StepTerm] = {}


def register(predictor: PassPredictor) -> PassPredictor:
    """Add a pass predictor under its name (a new `model_type`)."""
    if predictor.name in _PREDICTORS:
        raise ValueError(f"pass predictor {predictor.name!r} is registered twice")
    _PREDICTORS[predictor.name] = predictor
    return predictor


def unregister(name: str) -> None:
    _PREDICTORS.pop(name, None)


def predictor_names() -> tuple[str, ...]:
    return tuple(_PREDICTORS)


def get_predictor(name: str) -> PassPredictor:
    try:
        return _PREDICTORS[name]
    except KeyError:
        raise UserError(f"pass model type {name!r} is unknown", f"use one of {', '.join(_PREDICTORS)}") from None


def register_term(term: StepTerm) -> StepTerm:
    """Add a step term: every engine step of every mode is priced with it from then on."""
    if term.name in _TERMS:
        raise ValueError(f"step term {term.name!r} is registered twice")
    _TERMS[term.name] = term
    return term


def unregister_term(name: str) -> None:
    _TERMS.pop(name, None)


def step_terms() -> tuple[StepTerm, ...]:
    return tuple(_TERMS.values())
