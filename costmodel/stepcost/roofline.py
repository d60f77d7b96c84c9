"""The roofline pass model: a pass at its physical limit over one efficiency per kind,
ms = roofline_ms * coef["roofline_ms"] (coef = 1 / efficiency, >= 1), mixed passes weighted by each
kind's share of the query tokens as the linear model weights them. What `costmodel profile
roofline` describes, priced without the linear model's feature vector."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.roofline import Segment


class RooflinePredictor:
    name = "roofline"
    fallback = None
    linear_above_roofline = True

    def check(self, pm, where: str) -> None:
        if pm.table is not None or set(pm.coef) != {"roofline_ms"} or not pm.coef["roofline_ms"] >= 1.0:
            raise UserError(f"{where}: a roofline model has one coefficient, roofline_ms = 1 / efficiency >= 1, and no table",
                            "regenerate it with `costmodel profile roofline`")

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models: list, segments: tuple[Segment, ...]) -> float:
        roof = cost.roofline.pass_cost(segments).roofline_ms
        total = sum(s.seqs * s.tokens for s in segments)
        ms = sum((s.seqs * s.tokens / total) * pm.coef["roofline_ms"] * roof for s, pm in zip(segments, models))
        return max(roof, ms)
