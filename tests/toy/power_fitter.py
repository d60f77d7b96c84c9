"""The toy "power" predictor's fitter, the whole of it (what would be measure/fit/power.py): a kind's timed
passes (median per shape) fitted as const + scale * tokens ** exponent by non-linear least squares
(scipy's curve_fit, every coefficient >= 0). With its registration line in measure/fit/fitters.py
(`register(PowerFitter())`), `costmodel fit --pass-model power` writes power pass models
(tests/test_recipe_predictor.py)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import curve_fit

from costmodel.schemas.profile import FitDiagnostics, PassCostModel
from measure.fit.passes import SHAPE_COLS, PassFit, add_features, aggregate, mape_pct, support_of


def law(tokens, const, scale, exponent):
    return const + scale * np.power(tokens, exponent)


class PowerFitter:
    name = "power"

    def fit(self, rows, kind, roof, provenance, *, repeats, heldout, seed, time_column) -> PassFit:
        obs = add_features(aggregate(rows[[*SHAPE_COLS, "ms"]], repeats), roof, kind)
        ms, tokens = obs["ms"].to_numpy(float), obs["tokens_f"].to_numpy(float)
        start = (float(ms.min()), max(float(np.ptp(ms)), 1e-6) / max(float(tokens.max()), 1.0), 1.0)
        (const, scale, exponent), _ = curve_fit(law, tokens, ms, p0=start, bounds=((0.0, 0.0, 0.0), (np.inf, np.inf, 3.0)), maxfev=20_000)
        pred = np.maximum(obs["roofline_ms"].to_numpy(float), law(tokens, const, scale, exponent))
        coef = {"const": float(const), "scale": float(scale), "exponent": float(exponent)}
        model = PassCostModel(kind=kind, coef=coef, model_type=self.name, support=support_of(obs), provenance=provenance,
                              diagnostics=FitDiagnostics(n_obs=len(obs), mape_pct=mape_pct(ms, pred), summary=f"power law of tokens on {time_column}"),
                              median_x_roofline=float(np.median(ms / obs["roofline_ms"].to_numpy(float))))
        return PassFit(model, n_rows=len(rows), n_shapes=int(obs["shape_id"].nunique()), features=tuple(coef), heldout_desc="none",
                       candidates={})
