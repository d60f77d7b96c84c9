"""A toy pass predictor, the whole of it (what would be costmodel/stepcost/flat.py): a "flat" pass
model prices every pass of its kind at one constant (its `const` coefficient), never below the
roofline. With its registration line (`register(FlatPredictor())` in costmodel/stepcost/__init__.py)
a profile may name model_type "flat"; its fitter is tests/toy/flat_fitter.py."""

from __future__ import annotations

from costmodel.errors import UserError


class FlatPredictor:
    name = "flat"
    fallback = None
    linear_above_roofline = False  # max(roofline, const): floored by definition

    def check(self, pm, where: str) -> None:
        if set(pm.coef) != {"const"}:
            raise UserError(f"{where}: a flat model has one coefficient, const", "fit it with costmodel fit --pass-model flat")

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models, segments) -> float:
        return max(cost.roofline.pass_cost(segments).roofline_ms, max(pm.coef["const"] for pm in models))
