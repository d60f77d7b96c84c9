"""A toy pass predictor, the whole of it: a "flat" pass model prices every pass of its kind at one
constant (its `const` coefficient), never below the roofline. With its registration line
(`costmodel.stepcost.register(FlatPredictor())`) a profile may name model_type "flat"."""

from __future__ import annotations


class FlatPredictor:
    name = "flat"
    fallback = None

    def check(self, pm, where: str) -> None:
        assert set(pm.coef) == {"const"}, f"{where}: a flat model has one coefficient, const"

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models, segments) -> float:
        return max(cost.roofline.pass_cost(segments).roofline_ms, max(pm.coef["const"] for pm in models))
