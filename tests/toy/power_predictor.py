"""A toy pass predictor with a non-linear term, the whole of it (what would be costmodel/stepcost/power.py):
a "power" pass model prices a pass of its kind at const + scale * tokens ** exponent (tokens: the pass's
sequences x tokens per sequence), never below the roofline; a joint pass (a prefill chunk beside decoding
sequences) pays the largest const once and each segment's own token term. Its coefficients are its own, not the linear
models' roofline features: it names them (`coefficients`) and the profile schema takes them from it. With
its registration line (`register(PowerPredictor())` in costmodel/stepcost/__init__.py) a profile may name
model_type "power"; its fitter is tests/toy/power_fitter.py."""

from __future__ import annotations

from costmodel.errors import UserError

COEFFICIENTS = ("const", "scale", "exponent")


class PowerPredictor:
    name = "power"
    fallback = None
    linear_above_roofline = False  # a power law, floored at the roofline by definition
    coefficients = COEFFICIENTS

    def check(self, pm, where: str) -> None:
        if set(pm.coef) != set(COEFFICIENTS):
            raise UserError(f"{where}: a power model has the coefficients {', '.join(COEFFICIENTS)}", "fit it with costmodel fit --pass-model power")

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models, segments) -> float:
        const = max(pm.coef["const"] for pm in models)
        work = sum(pm.coef["scale"] * float(s.seqs * s.tokens) ** pm.coef["exponent"] for pm, s in zip(models, segments))
        return max(cost.roofline.pass_cost(segments).roofline_ms, const + work)
