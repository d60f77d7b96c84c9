"""The linear pass model: a pass's time from features of its shape that follow the roofline,

    ms = max(roofline_ms, sum_f coef[f] * feature_f(shape))

(`memory_ms`, `compute_ms` are the pass's roofline terms on the profile's GPU, so the coefficients
carry the engine's efficiency and survive projection to another GPU). A pass that mixes kinds
(prefills beside denoising canvases, as vLLM batches them) is priced on its joint roofline (one
weight read) with the coefficients of each kind weighted by its share of the pass's query tokens;
a pure pass reduces to its own model. Every other predictor falls back to this one.

An engine that replays CUDA graphs up to a captured size runs a larger step without them: every
kernel launched from the host, a cost that depends on the step's size, not on the roofline. The
`graph_off` features (1, and the pass's tokens, when its tokens exceed the engine's largest captured
size; 0 otherwise) let a fit on that engine's own steps price the two regimes apart (vLLM 0.26 on
Hopper: a step of 3 DiffusionGemma canvases, 768 tokens, costs 2.5x one of 2). Its `graph_off_tokens`
may be negative: the host's launches put a floor under eager steps that grows more slowly than the
graphed steps did (costmodel/schemas/profile.py SIGNED_SLOPES keeps every regime's slope >= 0). The `past_knee`
features do the same at a smaller size where the engine's kernels change regime, found in its
recorded steps (measure/fit/steps.py; vLLM 0.26 on Hopper: an AR decode step of 17 sequences costs
1.5x one of 16, and no more up to 32; past the graphs, where the GPU's work crosses the host's floor:
DiffusionGemma at 8 canvases on an H200). Past that knee a decoding sequence's context costs more
(`past_knee_context_ktokens`: the knee flag times the context of the sequences that decode, DECODE_QUERY_TOKENS
query tokens or fewer each): vLLM 0.26 on an H200 in fp8 ran 62 AR sequences of 428 tokens' context in 6.7 ms
and 51 of 1,654 tokens in 10.5 ms, while below the knee 15 sequences of 3,714 tokens took 5.7 ms and 14 of
1,632 5.3 ms (data/runs/engine/h200-fp8-ar*, closed loops); AR decode steps of 17-32 sequences, all near
1,600 tokens' context, take 8.4-8.7 ms whatever their count. Padding to the capture size (17 sequences run
as 24, 25 as 32) does not make that shape: 17-24 and 25-32 sequences take the same time.

An engine that drafts (MTP, k draft tokens a sequence) captures its full CUDA graphs of uniform verify steps at
its capture sizes rounded up to multiples of k + 1 (vLLM CompilationConfig.adjust_cudagraph_sizes_for_spec_decode:
1, 2, 4, 8, 16, 24, ... each rounded up). A verify step whose tokens are not one of those sizes is padded to the
next and runs slower: `graph_padded` (1 for such a step, 0 otherwise; vLLM 0.26 on an H200 in fp8: k = 2 at 4
sequences, 12 tokens, 22 ms where 3 sequences take 9 ms and 6 take 11 ms; k = 4 at 3 sequences 18.5 ms, at 4 10.2 ms;
k = 5 at 5 sequences 18.3 ms, at 4 and 6 11 ms: data/runs/engine/h200-fp8-mtp*)."""

from __future__ import annotations

from functools import lru_cache

from costmodel.errors import UserError
from costmodel.roofline import Segment

FEATURES = ("const", "roofline_ms", "memory_ms", "compute_ms", "kv_ms", "seqs", "tokens", "context_ktokens", "graph_off", "graph_off_tokens",
            "past_knee", "past_knee_tokens", "decode_context_ktokens", "past_knee_context_ktokens", "graph_padded")
DECODE_QUERY_TOKENS = 16  # a sequence of this many query tokens or fewer a step decodes (AR's 1, MTP's k + 1), a longer one prefills or denoises
REGIME_FEATURES = ("graph_off", "graph_off_tokens", "past_knee", "past_knee_tokens", "past_knee_context_ktokens", "graph_padded")  # a step-size regime's: the joint pass's alone


@lru_cache(maxsize=64)
def captured_sizes(query_tokens: int, graph_max_tokens: int) -> frozenset[int]:
    """The step sizes (tokens) an engine captures as CUDA graphs for uniform steps of `query_tokens` tokens a
    sequence: vLLM's default capture sizes up to its largest (1, 2, 4, then every 8 below 256, every 16 from 256),
    each rounded up to a multiple of `query_tokens` where that stays within the largest (vLLM 0.26
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode)."""
    base = [1, 2, 4, *range(8, min(graph_max_tokens + 1, 256), 8), *range(256, graph_max_tokens + 1, 16)]
    q = max(1, int(query_tokens))
    return frozenset(r for r in (-(-b // q) * q for b in base if b <= graph_max_tokens) if r <= graph_max_tokens)


def padded(segments, tokens: float, graph_max_tokens: int) -> float:
    """1.0 for a uniform multi-token step (one group of sequences of k + 1 tokens each, no prefill beside it) within
    the largest CUDA graph whose size is not a captured one (it is padded to the next: `graph_padded`), else 0.0."""
    if not graph_max_tokens or len(segments) != 1 or tokens > graph_max_tokens:
        return 0.0
    q = segments[0].tokens
    return 1.0 if q > 1 and int(tokens) not in captured_sizes(q, graph_max_tokens) else 0.0


def feature_values(roof_pass, segments, graph_max_tokens: int = 0, knee_tokens: int = 0) -> tuple[float, ...]:
    """features() as a tuple in FEATURES order (what a priced pass reads by position: no dict per pass)."""
    return feature_values_of(roof_pass.compute_ms, roof_pass.memory_ms, roof_pass.kv_read_bytes, roof_pass.kv_write_bytes, roof_pass.bytes,
                             segments, graph_max_tokens, knee_tokens)


def feature_values_of(compute_ms: float, memory_ms: float, kv_read_bytes: float, kv_write_bytes: float, total_bytes: float, segments,
                      graph_max_tokens: int = 0, knee_tokens: int = 0) -> tuple[float, ...]:
    """feature_values from the pass's roofline numbers (costmodel/roofline.py Roofline.pass_terms) instead of its record."""
    tokens = seqs = context = decode_context = 0
    for s in segments:  # each sum in the segments' order, as the generator sums it would
        tokens += s.seqs * s.tokens
        seqs += s.seqs
        c = s.seqs * s.context
        context += c
        if s.tokens <= DECODE_QUERY_TOKENS:
            decode_context += c
    tokens = float(tokens)
    context /= 1000.0
    decode_context /= 1000.0
    off = 1.0 if graph_max_tokens and tokens > graph_max_tokens else 0.0
    knee = 1.0 if knee_tokens and tokens > knee_tokens else 0.0
    return (
        1.0,
        max(compute_ms, memory_ms),  # roofline_ms
        memory_ms,
        compute_ms,
        # the KV-cache share of memory_ms: lets a fit price KV reads at another efficiency than weights
        memory_ms * (kv_read_bytes + kv_write_bytes) / total_bytes if total_bytes else 0.0,
        float(seqs),
        tokens,
        context,
        off,
        off * tokens,
        knee,
        knee * tokens,
        decode_context,
        knee * decode_context,
        padded(segments, tokens, graph_max_tokens),
    )


def features(roof_pass, segments, graph_max_tokens: int = 0, knee_tokens: int = 0) -> dict[str, float]:
    """Feature values of one pass (see FEATURES) from its roofline and shape; `graph_max_tokens`: the
    engine's largest CUDA-graph capture size, `knee_tokens`: the size past which its kernels' regime
    changes (0: not known, no regime)."""
    return dict(zip(FEATURES, feature_values(roof_pass, segments, graph_max_tokens, knee_tokens)))


FEATURE_POS = {f: i for i, f in enumerate(FEATURES)}
TOKENS_POS = FEATURE_POS["tokens"]


def coef_positions(coef: dict[str, float]) -> tuple[tuple[int, float], ...] | None:
    """coef as (position in FEATURES, coefficient) pairs in its own order, for linear_ms_at; None when it
    names a feature outside FEATURES (priced by name then)."""
    if any(f not in FEATURE_POS for f in coef):
        return None
    return tuple((FEATURE_POS[f], c) for f, c in coef.items())


def linear_ms(coef: dict[str, float], feats: dict[str, float]) -> float:
    return sum(c * feats[f] for f, c in coef.items())


def model_ms(cost, pm, values: tuple[float, ...]) -> float:
    """linear_ms of pass model pm on feature_values: by position (the same terms summed in the same
    order), with pm's positions kept by the mode's cost (`ModeCost.coef_positions`), else by name."""
    pairs = cost.coef_positions(pm) if hasattr(cost, "coef_positions") else coef_positions(pm.coef)
    if pairs is None:
        return linear_ms(pm.coef, dict(zip(FEATURES, values)))
    return sum(c * values[i] for i, c in pairs)


class LinearPredictor:
    name = "linear"
    fallback = None
    linear_above_roofline = True

    def check(self, pm, where: str) -> None:
        """Its features are checked for every model type (each keeps linear coefficients): the profile's validation."""
        if pm.table is not None:
            raise UserError(f"{where} carries a table but model_type is 'linear'", "set model_type to 'table' or drop the table")

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return True

    def pass_ms(self, cost, models: list, segments: tuple[Segment, ...]) -> float:
        roof = cost.roofline.pass_cost(segments)
        vals = feature_values(roof, segments)
        total_tokens = vals[TOKENS_POS]
        ms = 0.0
        for seg, pm in zip(segments, models):
            ms += (seg.seqs * seg.tokens / total_tokens) * model_ms(cost, pm, vals)
        return max(roof.roofline_ms, ms)
