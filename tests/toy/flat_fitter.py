"""The toy "flat" predictor's fitter, the whole of it (what would be measure/fit/flat.py): a kind's
timed passes as one constant, their median per-shape time. With its registration line in
measure/fit/fitters.py (`register(FlatFitter())`), `costmodel fit --pass-model flat` writes
flat pass models (tests/test_recipe_predictor.py)."""

from __future__ import annotations

import numpy as np

from costmodel.schemas.profile import FitDiagnostics, PassCostModel
from measure.fit.passes import SHAPE_COLS, PassFit, add_features, aggregate, mape_pct, support_of


class FlatFitter:
    name = "flat"

    def fit(self, rows, kind, roof, provenance, *, repeats, heldout, seed, time_column) -> PassFit:
        obs = add_features(aggregate(rows[[*SHAPE_COLS, "ms"]], repeats), roof, kind)
        ms = obs["ms"].to_numpy(float)
        const = float(np.median(ms))
        pred = np.maximum(obs["roofline_ms"].to_numpy(float), const)
        model = PassCostModel(kind=kind, coef={"const": const}, model_type=self.name, support=support_of(obs), provenance=provenance,
                              diagnostics=FitDiagnostics(n_obs=len(obs), mape_pct=mape_pct(ms, pred), summary=f"median of {time_column} per shape"),
                              median_x_roofline=float(np.median(ms / obs["roofline_ms"].to_numpy(float))))
        return PassFit(model, n_rows=len(rows), n_shapes=int(obs["shape_id"].nunique()), features=("const",), heldout_desc="none",
                       candidates={})
