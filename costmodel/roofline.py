"""Physical lower bounds for every pass kind: FLOPs and bytes moved, and the time each takes at
the GPU's peak tensor rate and memory bandwidth. Every measured pass is compared with this.

Accounting (per forward pass over a batch of `Segment`s that share one weight read):
- weights touched: attention, dense MLP, router and norms once; for MoE layers the expected number
  of distinct experts hit by T routed tokens, E*(1-(1-k/E)^T), each expert once; the tied
  embedding/lm_head (V x d) once if the pass computes logits; DiffusionGemma's denoise step reads
  the embedding a second time for self-conditioning (softmax(prev logits) @ E) and its
  self-conditioning MLP.
- KV cache: every sequence reads its visible cached prefix in every layer (sliding layers see at
  most `sliding_window` tokens; k_eq_v global layers store K only) and passes that write KV append
  their new tokens.
- logits: fp32, written once and read once by the sampler, over the 262,144-token vocabulary.
- FLOPs: 2 per active parameter per token (body, top-k experts, lm_head where logits are made),
  attention scores and values 4*heads*head_dim per (query, visible key) pair.
Activations between layers are not counted (tens of MB at most, against GBs of weights).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import NamedTuple

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec
from costmodel.models import ModelShape
from costmodel.precision import Precision
from costmodel.registry import Registry

LOGIT_BYTES = 4  # fp32 logits (softcapping and sampling run in fp32)


@dataclass(frozen=True)
class PassKind:
    """One kind of forward pass and what it computes; consumers (the roofline below, the operator
    shapes of measure/ops, the step fits) read these fields instead of testing the kind's name."""

    name: str
    role: str  # "target" (the served model) or "assistant" (MTP drafter)
    writes_kv: bool
    logits: str  # "all" tokens, "last" token per sequence, or "none" (the roofline's accounting)
    attention: str  # the mask: "causal" | "bidirectional"
    self_conditioning: bool = False
    doc: str = ""
    sampler: str = "none"  # the sampler the serving engine runs after it: "canvas" (DiffusionGemma's, every canvas position), "token", "none"
    recorded_as: str = ""  # measure/vllm's step recorder counts its sequences and tokens in <recorded_as>_reqs / _tokens ("": not recorded apart)
    query_tokens: str = "one"  # a sequence's natural query tokens: "prompt", "canvas" (the model's canvas length), "drafts+1", "one"
    # a measured kind whose fitted coefficients an untimed run of this one may carry (measure/fit/assemble.py), and why that
    # is a fair stand-in ("": none, the fit fills it otherwise)
    stand_in: str = ""
    stand_in_why: str = ""


PASS_KINDS: Registry[PassKind] = Registry("pass kind", [
    PassKind("encoder_prefill", "target", True, "none", "causal", doc="encoder over the prompt; writes KV, no lm_head", recorded_as="prefill",
             query_tokens="prompt", stand_in="prefill",
             stand_in_why="the same 26B-A4B body (both checkpoints share the text config), causal, writes KV; no logits"),
    PassKind("denoise_step", "target", False, "all", "bidirectional", True,
             doc="decoder over the 256-token canvas against the cached prefix; logits for every canvas position", sampler="canvas",
             recorded_as="denoise", query_tokens="canvas"),
    PassKind("encoder_commit", "target", True, "none", "causal", doc="encoder over the previous converged canvas; appends its KV",
             sampler="canvas", recorded_as="commit", query_tokens="canvas", stand_in="encoder_prefill",
             stand_in_why="the same causal encoder writing KV without logits; a commit covers 256 tokens over a cached prefix"),
    PassKind("prefill", "target", True, "last", "causal", doc="prompt prefill; logits for the last position", sampler="token",
             recorded_as="prefill", query_tokens="prompt", stand_in="encoder_prefill",
             stand_in_why="the same 26B-A4B body (both checkpoints share the text config), causal, writes KV; adds last-token logits"),
    PassKind("decode_step", "target", True, "all", "causal", doc="one new token per sequence", sampler="token", recorded_as="decode",
             stand_in="verify_step",
             stand_in_why="same target model; a causal pass with logits for every token, over 1 token per sequence instead of k+1"),
    PassKind("draft_step", "assistant", False, "all", "causal", doc="one assistant pass proposing one draft token per sequence",
             sampler="token"),
    PassKind("verify_step", "target", True, "all", "causal", doc="target pass over k+1 tokens per sequence", sampler="token",
             recorded_as="verify", query_tokens="drafts+1", stand_in="decode_step",
             stand_in_why="same target model; a causal pass with logits for every token, over k+1 tokens per sequence instead of 1"),
])


def register_pass_kind(kind: PassKind) -> PassKind:
    """Add a pass kind (an entry of PASS_KINDS made elsewhere, e.g. by a plug-in or a test)."""
    return PASS_KINDS.register(kind)


def unregister_pass_kind(name: str) -> None:
    PASS_KINDS.unregister(name)


def get_pass_kind(name: str) -> PassKind:
    return PASS_KINDS.get_member(name)


class Segment(NamedTuple):
    """`seqs` sequences, each adding `tokens` query tokens on top of `context` cached tokens. A named tuple,
    not a dataclass: the step pricer makes, hashes and compares hundreds of thousands of them per plan, and
    a tuple's are C calls (a frozen dataclass's __init__, __hash__ and __eq__ are Python functions)."""

    kind: str
    seqs: int
    tokens: int
    context: int = 0

    def validate(self) -> "Segment":
        get_pass_kind(self.kind)
        if self.seqs < 1 or self.tokens < 1 or self.context < 0:
            raise UserError(
                f"impossible pass shape {self.kind}: seqs={self.seqs} tokens={self.tokens} context={self.context}",
                "sequences and tokens must be >= 1 and context >= 0",
            )
        return self


@dataclass(frozen=True)
class PassRoofline:
    flops: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    logits_bytes: float
    experts_touched_per_layer: float
    compute_ms: float
    memory_ms: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.logits_bytes

    @property
    def roofline_ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_ms >= self.memory_ms else "memory"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(bytes=self.bytes, roofline_ms=self.roofline_ms, bound=self.bound)
        return d


def expected_experts_touched(num_experts: int, top_k: int, routed_tokens: int) -> float:
    """Expected distinct experts hit when each of T tokens picks k of E uniformly: E*(1-(1-k/E)^T)."""
    if num_experts == 0 or routed_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** routed_tokens)


def _visible_sum(context: int, tokens: int, window: int | None, attention: str) -> float:
    """Sum over the pass's query tokens of the keys each one sees (cached prefix + new tokens)."""
    if attention == "bidirectional":
        per = context + tokens
        return tokens * (min(per, window) if window else per)
    # causal: query i (1-based) sees context + i keys, clipped at the window
    if not window:
        return tokens * context + tokens * (tokens + 1) / 2
    n_unclipped = max(0, min(tokens, window - context))
    s = n_unclipped * context + n_unclipped * (n_unclipped + 1) / 2
    return s + (tokens - n_unclipped) * window


@lru_cache(maxsize=64)
def _layer_counts(m: ModelShape) -> tuple[tuple[str, int], ...]:
    """(layer type, how many layers have it), in order of first appearance."""
    counts: dict[str, int] = {}
    for lt in m.layer_types:
        counts[lt] = counts.get(lt, 0) + 1
    return tuple(counts.items())


class Roofline:
    """Roofline of one model on one GPU at one precision. `model` serves the target pass kinds;
    `assistant` (MTP drafter) serves `draft_step`."""

    def __init__(self, model: ModelShape, hardware: HardwareSpec, precision: Precision, assistant: ModelShape | None = None):
        self.model = model
        self.assistant = assistant
        self.hardware = hardware
        self.precision = precision
        self.flops_per_ms = hardware.peak_tflops(precision) * 1e9
        self.bytes_per_ms = hardware.memory_bandwidth_tbps * 1e9
        self._terms: dict = {}  # Segment -> (model, its terms): _segment
        self._seg_roof: dict = {}  # Segment -> roofline ms of a pass over it alone

    def _model_for(self, kind: PassKind) -> ModelShape:
        if kind.role == "assistant":
            if self.assistant is None:
                raise UserError(f"pass kind {kind.name} needs the MTP assistant's shape", "pass an assistant model")
            return self.assistant
        return self.model

    def segment_terms(self, m: ModelShape, kind: PassKind, seg: Segment) -> tuple[float, float, float, float, float]:
        """(flops excluding weight-proportional body flops, kv_read, kv_write, logits_bytes, logit_tokens)."""
        T = seg.seqs * seg.tokens
        logit_tokens = T if kind.logits == "all" else (seg.seqs if kind.logits == "last" else 0)
        kvb = self.precision.kv_bytes
        attn_flops = 0.0
        kv_read = 0.0
        for lt, count in _layer_counts(m):
            full = lt == "full_attention"
            hd = m.global_head_dim if full else m.head_dim
            window = None if full else m.sliding_window
            vis = _visible_sum(seg.context, seg.tokens, window, kind.attention)
            cached = seg.context if full else min(seg.context, m.sliding_window)
            attn_flops += count * (4.0 * m.num_attention_heads * hd * vis * seg.seqs)
            kv_read += count * (cached * m.kv_elems_per_token_layer(lt) * kvb * seg.seqs)
        kv_write = T * m.kv_bytes_per_token(kvb) if kind.writes_kv else 0.0
        logits_bytes = 2.0 * logit_tokens * m.vocab_size * LOGIT_BYTES
        return attn_flops, kv_read, kv_write, logits_bytes, float(logit_tokens)

    def pass_cost(self, segments: tuple[Segment, ...] | list[Segment] | Segment) -> PassRoofline:
        """Roofline of ONE forward pass over `segments` (they share one read of the weights)."""
        if isinstance(segments, Segment):
            segments = (segments,)
        segments = tuple(segments)
        return self._pass_cost(segments)

    def _segment(self, seg: Segment) -> tuple:
        """(model, segment_terms + (self-conditioning tokens,)) of one validated segment, memoised:
        one segment recurs in many mixed passes."""
        hit = self._terms.get(seg)
        if hit is None:
            kind = get_pass_kind(seg.validate().kind)
            m = self._model_for(kind)
            hit = self._terms[seg] = (m, self.segment_terms(m, kind, seg) + (seg.seqs * seg.tokens if kind.self_conditioning else 0,))
        return hit

    def segment_roofline_ms(self, seg: Segment) -> float:
        """Roofline ms of a pass over this one segment, memoised."""
        v = self._seg_roof.get(seg)
        if v is None:
            v = self._seg_roof[seg] = self._pass_cost((seg,)).roofline_ms
        return v

    @lru_cache(maxsize=65536)
    def _pass_cost(self, segments: tuple[Segment, ...]) -> PassRoofline:
        return PassRoofline(*self.pass_terms(segments))

    def pass_terms(self, segments: tuple[Segment, ...]) -> tuple[float, float, float, float, float, float, float, float]:
        """PassRoofline's fields of ONE forward pass over `segments`, in its order, as a plain tuple: what the step
        pricer reads when it prices a shape it has not met (no record made; pass_cost wraps it)."""
        if not segments:
            raise UserError("a pass needs at least one segment", "give seqs/tokens for one pass kind")
        terms = self._terms
        m = None
        T_total = 0
        flops = 0.0
        kv_read = kv_write = logits_bytes = 0.0
        any_logits = False
        sc_tokens = 0
        for seg in segments:
            hit = terms.get(seg)
            if hit is None:
                hit = self._segment(seg)
            if m is None:
                m = hit[0]
                lm_head = m.embedding_params
            elif hit[0] is not m:
                raise UserError("one forward pass cannot mix target and assistant pass kinds", "time draft_step passes separately")
            a, r, w, lb, lt, sc = hit[1]
            T_total += seg.seqs * seg.tokens
            flops += a + 2.0 * lt * lm_head  # lm_head
            kv_read += r
            kv_write += w
            logits_bytes += lb
            any_logits |= lt > 0
            sc_tokens += sc
        body = m.shared_body_params - m.self_conditioning_params
        active_body = body + m.num_hidden_layers * m.top_k_experts * m.expert_params
        flops += 2.0 * T_total * active_body
        touched = expected_experts_touched(m.num_experts, m.top_k_experts, T_total)
        weights = body + m.num_hidden_layers * touched * m.expert_params
        if any_logits:
            weights += m.embedding_params
        if sc_tokens:
            # softmax(previous logits) @ embedding, then the self-conditioning MLP
            flops += 2.0 * sc_tokens * (m.embedding_params + m.self_conditioning_params)
            weights += m.embedding_params + m.self_conditioning_params
        weight_bytes = weights * self.precision.weight_bytes
        total_bytes = weight_bytes + kv_read + kv_write + logits_bytes
        return (flops, weight_bytes, kv_read, kv_write, logits_bytes, touched, flops / self.flops_per_ms, total_bytes / self.bytes_per_ms)


def default_tokens(kind: str, model: ModelShape, prompt_tokens: int, draft_tokens: int) -> int:
    """The natural query-token count of one sequence in a pass of this kind (`PassKind.query_tokens`)."""
    q = get_pass_kind(kind).query_tokens
    if q == "prompt":
        return prompt_tokens
    if q == "canvas":
        return model.canvas_length or 256
    if q == "drafts+1":
        return draft_tokens + 1
    return 1


def crossover_batch(roof: Roofline, kind: str, tokens: int, context: int, max_batch: int = 4096) -> int | None:
    """Smallest batch (sequences) at which the pass turns compute-bound, or None below max_batch."""
    lo, hi = 1, max_batch
    if roof.pass_cost(Segment(kind, hi, tokens, context)).bound == "memory":
        return None
    if roof.pass_cost(Segment(kind, lo, tokens, context)).bound == "compute":
        return 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if roof.pass_cost(Segment(kind, mid, tokens, context)).bound == "compute":
            hi = mid
        else:
            lo = mid
    return hi
