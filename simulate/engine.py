"""The engine of one replica: its settings (costmodel/engine_settings.py EngineSettings, resolved per
mode: `mode_settings`), the profile as those settings run it (`engine_profile`: the engine's canvas,
denoising budget and k), the limits and KV capacity the replica memory model gives them (ReplicaLimits).

What one engine step runs and how a request advances is each mode's own engine (simulate/engines/
diffusion.py, ar.py, mtp.py, subclasses of scheduler.Replica). A step's duration is the profile's price of exactly that mix
(steptime.StepPricer). Per-step work is O(1) in the number of running sequences: counters hold the
batch composition, and each request's next transition sits in `events[step]` (scheduler.py).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

from costmodel.engine_settings import (ENTROPY_BOUND, EngineSettings, check_vllm_rules, engine_platform, from_profile, layered, vllm_defaults)
from costmodel.errors import UserError
from costmodel.memory import kv_capacity, replica_memory
from costmodel.modes import ServingMode
from costmodel.schemas.profile import Profile
from costmodel.stepcost.host_overhead import mode_record

# The simulator's engine settings are costmodel's one record (costmodel/engine_settings.py); the old name stays
EngineConfig = EngineSettings


def settings_for_profile(profile: Profile, given: EngineSettings | None = None) -> EngineSettings:
    """`given` (CLI or spec, or a recorded run's) over the profile's engine section: the settings a
    point starts from; per mode, `mode_settings` fills in vLLM's defaults."""
    return layered(given or EngineSettings(), from_profile(profile))


def mode_settings(profile: Profile, mode: ServingMode, cfg: EngineSettings) -> tuple[EngineSettings, list[str]]:
    """Every setting of `mode`'s engine: `cfg`, then the profile (its engine section, MTP's k), then
    vLLM 0.32's defaults for this model and platform, with vLLM's rewrites applied (their notes) and
    its refusals raised. The batch limits stay None here: the memory model fills them (replica_limits)."""
    r, name = profile.resolved(), mode.name
    s = layered(cfg.for_mode(mode), from_profile(profile, mode), vllm_defaults(mode, r.models[name], gpu=engine_platform(profile.engine) == "gpu"))
    s, notes = check_vllm_rules(s, mode, engine_platform(profile.engine))
    if s.entropy_bound is not None and s.entropy_bound != _profile_entropy_bound(profile):
        raise UserError(f"entropy_bound {s.entropy_bound:g} ({s.source('entropy_bound')}): profile {profile.profile_id}'s commit statistics "
                        f"were measured at {_profile_entropy_bound(profile):g} and steps per canvas at another bound cannot be derived "
                        "from them", "drop the setting, or fit a profile from runs at that bound")
    return s, notes


def _profile_entropy_bound(profile: Profile) -> float:
    e = profile.engine.get("entropy_bound") if isinstance(profile.engine, dict) else None
    return float(e) if isinstance(e, (int, float)) and not isinstance(e, bool) else ENTROPY_BOUND


# (id(profile), mode, canvas, denoising budget, k) -> (weakref to the profile, the view): one view per
# setting, so step prices (cached per profile object) are reused across points
_VIEWS: dict = {}


def engine_profile(profile: Profile, mode: ServingMode, s: EngineSettings) -> Profile:
    """The profile as an engine with settings `s` runs it: the canvas the draws cut outputs into
    (the engine's, not the model catalog's), async scheduling (what the host-overhead step term hides
    behind the forward), every canvas's denoising steps clipped at
    max_denoising_steps (clipping the steps-per-canvas distribution clips every draw), MTP's
    per-position acceptance for k drafts (fewer than measured: the first k positions; more: refused).
    The profile itself when nothing differs."""
    key = (id(profile), mode.name, s.canvas_length, s.max_denoising_steps, s.num_speculative_tokens, s.async_scheduling)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0]() is profile:
        return hit[1]
    changes = mode.engine_view(profile, s)  # the mode's own parts as this engine runs them (its canvas, denoising budget, k)
    eng = changes.get("engine", profile.engine if isinstance(profile.engine, dict) else {})
    rec = mode_record(eng, mode.name)
    overlaps = rec is not None and not rec.get("net_of_overlap")  # a term net of overlap is added whatever the setting
    if overlaps and s.async_scheduling is not None and eng.get("async_scheduling") != s.async_scheduling:
        changes["engine"] = {**eng, "async_scheduling": bool(s.async_scheduling)}  # the host-overhead term's overlap (costmodel/stepcost)
    view = replace(profile, **changes) if changes else profile
    if len(_VIEWS) > 256:
        _VIEWS.clear()
    _VIEWS[key] = (weakref.ref(profile), view)
    return view


@dataclass(frozen=True)
class ReplicaLimits:
    """What one replica runs with: the settings in force, its KV capacity in context tokens, and
    how many requests it can run at once and what sets that number."""

    cfg: EngineSettings  # every setting filled in, with its source
    kv_capacity_tokens: int
    max_running: int
    running_binding: str  # "kv blocks" | "max_num_seqs" | "sampler buffers" | "kv_capacity_tokens (given)"


def replica_limits(profile: Profile, mode: ServingMode, cfg: EngineSettings, context_tokens) -> ReplicaLimits:
    """vLLM 0.32's engine limits and KV blocks for this GPU, mode and model (costmodel/memory.py),
    as a token budget for requests of these final contexts (prompt + output). `cfg` is filled in
    by `mode_settings` first; the filled record's sources name the memory model where it decided."""
    r = profile.resolved()
    s, _ = mode_settings(profile, mode, cfg)
    m = profile.mode(mode.name)
    memo, key = r.memo("replica-memory"), (mode.name, s.memory_settings(), m.model, m.assistant)  # one budget per setting, not per point
    mem = memo.get(key) or memo.setdefault(key, replica_memory(r.spec, mode, r.precision, key[1], model=m.model, assistant=m.assistant))
    lim = mem.limits
    memory_src = "default: costmodel/memory.py "
    filled = s
    for name in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"):
        if getattr(s, name) is None:
            filled = filled.with_values(memory_src + lim.source.get(name, "engine limits"), **{name: getattr(lim, name)})
    if s.max_num_batched_tokens is not None and s.max_num_seqs is None:  # a given budget meets the defaulted max_num_seqs: vLLM's rule still holds
        check_vllm_rules(filled, mode, engine_platform(profile.engine))
    cap = kv_capacity(mem, [int(c) for c in context_tokens] or [1])
    if cfg.kv_capacity_tokens is not None:
        return ReplicaLimits(filled, int(cfg.kv_capacity_tokens), lim.max_num_seqs, "kv_capacity_tokens (given)")
    return ReplicaLimits(filled, cap.tokens, cap.max_running, cap.binding)
