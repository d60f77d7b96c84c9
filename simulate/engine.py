"""The engine of one replica: the engine settings (EngineConfig), the KV capacity they leave, and
the replica class of a mode (its engine mixin from costmodel/modes over scheduler.Replica).

What one engine step runs and how a request advances is each mode's own (costmodel/modes/
diffusion.py, ar.py, mtp.py). A step's duration is the profile's price of exactly that mix
(steptime.StepPricer). Per-step work is O(1) in the number of running sequences: counters hold the
batch composition, and each request's next transition sits in `events[step]` (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.models import get_model
from costmodel.modes import ServingMode
from costmodel.precision import get_precision
from costmodel.schemas.profile import Profile
from simulate.scheduler import Replica
from simulate.steptime import DEFAULT_SHAPE_BITS

# Engine defaults (chosen; typical vLLM online-serving settings): a deployment's own values belong in
# the profile's engine settings or on the command line.
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# Memory vLLM may use (its gpu_memory_utilization); the other 10% is the reserve for activations,
# CUDA graphs and the allocator, so KV = utilisation * GPU memory - weights.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class EngineConfig:
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    kv_capacity_tokens: int | None = None  # overrides the memory-derived capacity (what-ifs, tests)
    shape_bits: int = DEFAULT_SHAPE_BITS  # pricing resolution (pricing.py); 0 = exact shapes

    def validate(self) -> "EngineConfig":
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} {v!r} must be an integer >= 1", f"e.g. --{name.replace('_', '-')} 256")
        u = self.gpu_memory_utilization
        if not (isinstance(u, (int, float)) and 0 < u <= 1):
            raise UserError(f"gpu_memory_utilization {u!r} must be in (0, 1]", "e.g. --gpu-memory-utilization 0.9")
        if self.kv_capacity_tokens is not None and (not isinstance(self.kv_capacity_tokens, int) or self.kv_capacity_tokens < 1):
            raise UserError(f"kv_capacity_tokens {self.kv_capacity_tokens!r} must be an integer >= 1", "give a positive token count")
        if not isinstance(self.shape_bits, int) or not 0 <= self.shape_bits <= 16:
            raise UserError(f"shape_bits {self.shape_bits!r} must be an integer in 0..16", "0 prices exact shapes; 5 is the default")
        return self

    @classmethod
    def for_profile(cls, profile: Profile, **overrides) -> "EngineConfig":
        """Defaults, then the engine settings the profile was measured with (profile.engine
        `max_num_seqs`, `max_num_batched_tokens`, `gpu_memory_utilization`, where it records valid
        ones: a run manifest may hold other engine facts), then `overrides`."""
        eng = profile.engine if isinstance(profile.engine, dict) else {}
        base = {k: eng[k] for k in ("max_num_seqs", "max_num_batched_tokens") if _is_count(eng.get(k))}
        u = eng.get("gpu_memory_utilization")
        if isinstance(u, (int, float)) and not isinstance(u, bool) and 0 < u <= 1:
            base["gpu_memory_utilization"] = float(u)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base).validate()


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def kv_capacity_tokens(profile: Profile, mode: str, cfg: EngineConfig) -> int:
    """KV-cache tokens one replica holds: (utilisation x GPU memory - weights) / KV bytes per token.
    Weights: the target's total parameters (MTP: plus the assistant's) at the profile's precision."""
    if cfg.kv_capacity_tokens is not None:
        return int(cfg.kv_capacity_tokens)
    prec = get_precision(profile.precision)
    m = profile.mode(mode)
    model = get_model(m.model)
    weights = model.total_params * prec.weight_bytes
    if m.assistant:  # MTP: the assistant's weights sit beside the target's
        weights += get_model(m.assistant).total_params * prec.weight_bytes
    mem = float(profile.hardware["memory_gb"]) * 1e9
    free = cfg.gpu_memory_utilization * mem - weights
    per_token = model.kv_bytes_per_token(prec.kv_bytes)
    cap = int(free // per_token) if per_token > 0 else 0
    if cap < 1:
        raise UserError(f"{model.name} at {prec.name} ({weights / 1e9:.1f} GB of weights) leaves no KV cache in "
                        f"{cfg.gpu_memory_utilization:g} x {mem / 1e9:g} GB on {profile.hardware.get('id')}",
                        "use a lower precision profile, a GPU with more memory, or a higher --gpu-memory-utilization")
    return cap


_CLASSES: dict[type, type] = {}


def replica_class(mode: ServingMode) -> type:
    """The replica class of a mode: its engine mixin over the continuous-batching Replica (built
    once per mixin)."""
    cls = _CLASSES.get(mode.engine)
    if cls is None:
        cls = _CLASSES[mode.engine] = type(f"{mode.engine.__name__}Replica", (mode.engine, Replica), {})
    return cls
