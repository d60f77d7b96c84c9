"""The fitters of pass models from timed passes, one per pass-model type (`costmodel fit
--pass-model TYPE`, default linear): each writes `PassCostModel`s of its `model_type`, which the
predictor of that name in costmodel/stepcost prices. A new predictor's fitter is one module in
measure/fit plus one registration line below (docs/architecture.md, the step-cost predictor recipe)."""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from costmodel.errors import UserError
from costmodel.records import Provenance
from costmodel.registry import Registry
from costmodel.roofline import Roofline
from costmodel.stepcost import predictor_names
from measure.fit.passes import HeldoutSpec, PassFit, fit_pass_kind


class PassFitter(Protocol):
    """Fits one pass kind's timed passes as a pass model of the type it is named after."""

    name: str  # the model_type it writes: a registered predictor

    def fit(self, rows: pd.DataFrame, kind: str, roof: Roofline, provenance: Provenance, *, repeats: str, heldout: HeldoutSpec,
            seed: int, time_column: str) -> PassFit:
        """`rows`: pass_kind == kind, columns seqs, tokens_per_seq, context_tokens, ms (measure/fit/passes.py)."""


class LinearFitter:
    """statsmodels WLS on roofline features (measure/fit/passes.py): the linear predictor's models."""

    name = "linear"

    def fit(self, rows, kind, roof, provenance, **how) -> PassFit:
        return fit_pass_kind(rows, kind, roof, provenance, **how)


_FITTERS: Registry[PassFitter] = Registry("pass-model fitter")
register = _FITTERS.register
unregister = _FITTERS.unregister


def fitter_names() -> tuple[str, ...]:
    return tuple(_FITTERS)


def get_fitter(model_type: str) -> PassFitter:
    """The fitter of `model_type`, which a registered predictor must price."""
    fitter = _FITTERS.get_member(model_type)
    if model_type not in predictor_names():
        raise UserError(f"--pass-model {model_type}: no registered predictor prices it", f"register one in costmodel/stepcost ({', '.join(predictor_names())})")
    return fitter


# ---- the registered fitters: one line each ---------------------------------------------------
register(LinearFitter())
