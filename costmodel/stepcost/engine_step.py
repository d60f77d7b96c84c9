"""The engine-step pass model: pass costs fitted on a serving engine's own recorded steps
(measure/fit/steps.py), priced the way they were fitted.

vLLM runs one forward pass per engine step over everything scheduled (prefill chunks beside
decoding, denoising or verifying groups). A fit on those steps learns each kind's coefficients as
its token share of the joint step, on the joint step's features, so a kind alone (a 42-token
prefill) is not a measured shape: the price is the share-weighted sum on the joint pass's features,
floored at the joint roofline, exactly as in the fit. The features include the engine's CUDA-graph
regime (`graph_off`, costmodel/stepcost/linear.py): the largest captured step size comes from the
profile's engine section (`cuda_graph_max_tokens`, per mode), so a step just past it is priced as
the engine ran it, without graphs; likewise a step past the size where the engine's kernels change
regime (`step_knee_tokens`, found in the recorded steps)."""

from __future__ import annotations

from costmodel.roofline import Segment
from costmodel.stepcost.linear import TOKENS_POS, feature_values_of, model_ms


class EngineStepPredictor:
    name = "engine-step"
    fallback = None
    linear_above_roofline = False

    def check(self, pm, where: str) -> None:
        """Linear coefficients only (checked with every model's features by the profile's validation)."""

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models: list, segments: tuple[Segment, ...]) -> float:
        # the roofline's numbers without its record (a step price misses on shapes it has not met: this is its cost)
        _, weight_bytes, kv_read, kv_write, logits_bytes, _, compute_ms, memory_ms = cost.roofline.pass_terms(segments)
        vals = feature_values_of(compute_ms, memory_ms, kv_read, kv_write, weight_bytes + kv_read + kv_write + logits_bytes, segments,
                                 cost.graph_max_tokens, cost.knee_tokens)
        total = vals[TOKENS_POS]
        ms = sum([(seg.seqs * seg.tokens / total) * _model_ms(cost, pm, vals) for seg, pm in zip(segments, models)])
        return max(vals[1], ms)  # floored at the pass's roofline_ms


def _model_ms(cost, pm, vals: tuple) -> float:
    """linear.model_ms with the mode's cost's positions read here (the same terms, summed in the same order)."""
    hit = cost.positions.get(id(pm)) if hasattr(cost, "positions") else None
    if hit is not None and hit[0] is pm and hit[1] is not None:
        return sum([c * vals[i] for i, c in hit[1]])
    return model_ms(cost, pm, vals)
