"""The engine of one replica per mode: what one engine step runs, and how a request advances.

- diffusion (vLLM's DiffusionGemma data path): after its prefill, a request denoises its canvas
  for k steps (one denoise forward of 256 query tokens per engine step), then the next engine step
  is its commit pass (encoder_commit, 256 tokens, writes the canvas's KV) whose end emits the
  canvas's tokens (256, the last canvas the remainder): k+1 engine steps per canvas, the last one
  included. Its first output is the end of the first commit. Requests are not synchronised: one
  engine step mixes prefill chunks, denoising canvases and commits in one forward pass.
- ar: the prefill's last chunk emits the first token; then one decode token per step.
- mtp: the prefill emits the first token; then each engine step runs k draft passes of the
  assistant (sequential, one token each) and one verify pass of k+1 tokens per sequence, emitting
  1 + accepted drafts (drawn per request, request.MtpPlan).

A step's duration is the profile's price of exactly that mix (pricing.StepPricer). Per-step work
is O(1) in the number of running sequences: counters hold the batch composition, and each
request's next transition sits in `events[step]` (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from simulate.steptime import DEFAULT_SHAPE_BITS
from simulate.scheduler import Replica

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
    from costmodel.models import get_model
    from costmodel.precision import get_precision

    prec = get_precision(profile.precision)
    m = profile.mode(mode)
    model = get_model(m.model)
    weights = model.total_params * prec.weight_bytes
    if mode == "mtp" and m.assistant:
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


class ArReplica(Replica):
    """AR: counters n_dec (decoding sequences) and sum_ctx (their contexts); a step emits `g` tokens
    per sequence (1 for AR). MTP is the same engine with a different step (MtpReplica)."""

    tokens_per_seq = 1  # query tokens (and KV slots written) per decoding sequence per step
    g = 1  # mean tokens emitted per decoding sequence per step

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.n_dec = 0
        self.sum_ctx = 0

    def schedule(self) -> float:
        s = self.step
        n = self.n_dec
        look = self.tokens_per_seq  # KV slots a step writes before rejected drafts free them
        while n and self.kv_used + self.kv_reserved + n * look > self.kv_cap:
            self.preempt_last(s)
            n = self.n_dec
        self.kv_used += n * self.g
        m, tp, psum = self.schedule_prefill(self.budget - n * look, self.env.now)
        dt = self.price(m, tp, psum, n, self.sum_ctx)
        self.account(dt, m, tp, n, 0)
        return dt

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        self.sum_ctx += self.n_dec * self.g
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events.pop(s, None)
        if ev:
            for r, ep in ev:
                if ep == r.epoch:
                    done = s - r.dec_start + 1
                    kv = r.ctx0 + self.g * done
                    self.n_dec -= 1
                    self.sum_ctx -= kv
                    self._advance(r, done)
                    r.emitted = r.n_out
                    self.finish(r, t, kv)

    def enter_decode(self, r, s: int, t: float) -> None:
        r.emitted += 1
        self.first_output(r, t)
        rem = r.n_out - r.emitted
        if rem <= 0:
            self.finish(r, t, r.prefill_len)
            return
        r.dec_start = s + 1
        r.ctx0 = r.prefill_len
        self.n_dec += 1
        self.sum_ctx += r.ctx0
        self.push(s + self._steps_for(r, rem), r)

    def drop_decoder(self, r, s: int) -> None:
        done = s - r.dec_start
        kv = r.ctx0 + self.g * done
        self.n_dec -= 1
        self.sum_ctx -= kv
        self.kv_used -= kv
        r.emitted += self._tokens_after(r, done)
        self._advance(r, done)
        r.prefill_len = r.prompt + r.emitted

    # one token per step; MTP overrides these three
    def _steps_for(self, r, rem: int) -> int:
        return rem

    def _tokens_after(self, r, done: int) -> int:
        return done

    def _advance(self, r, done: int) -> None:
        r.steps += done


class MtpReplica(ArReplica):
    """MTP: like AR, but a step emits 1 + accepted drafts per sequence. Contexts and KV grow by the
    mean acceptance length per step in the counters (exact per-sequence counts would need a
    per-step loop); each request's own emitted tokens and step count are exact."""

    def __init__(self, *a, **kw):
        plan = kw["plan"]
        self.tokens_per_seq = plan.k + 1
        super().__init__(*a, **kw)
        self.k = plan.k
        self.g = plan.mean_tokens
        self.sum_ctx = 0.0

    def _steps_for(self, r, rem: int) -> int:
        return self.plan.steps_for(r, rem)

    def _tokens_after(self, r, done: int) -> int:
        return self.plan.tokens_after(r, done)

    def _advance(self, r, done: int) -> None:
        r.steps += done
        r.mpos += done


class DiffusionReplica(Replica):
    """Diffusion: counters for denoising canvases (n_den, s_den) and commits (n_com, s_com)."""

    def __init__(self, *a, **kw):
        plan = kw["plan"]
        self.tokens_per_seq = plan.canvas
        super().__init__(*a, **kw)
        self.C = plan.canvas
        self.k = plan.k
        self.kofs = plan.kofs
        self.nblocks = plan.blocks_list
        self.n_den = self.n_com = 0
        self.s_den = self.s_com = 0

    def schedule(self) -> float:
        s = self.step
        C = self.C
        nc = self.n_com
        while nc and self.kv_used + self.kv_reserved + C * nc > self.kv_cap:
            self.preempt_last(s)
            nc = self.n_com
        self.kv_used += C * nc
        nd = self.n_den
        m, tp, psum = self.schedule_prefill(self.budget - C * (nd + nc), self.env.now)
        dt = self.price(m, tp, psum, nd, self.s_den, nc, self.s_com)
        self.account(dt, m, tp, nd, nc)
        return dt

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events.pop(s, None)
        if ev:
            C = self.C
            for r, ep in ev:
                if ep != r.epoch:
                    continue
                if not r.committing:  # k denoising steps done: the next step is the commit pass
                    self.n_den -= 1
                    self.s_den -= r.ctx0
                    self.n_com += 1
                    self.s_com += r.ctx0
                    r.steps += s - r.dec_start + 1
                    r.committing = True
                    r.dec_start = s + 1
                    self.push(s + 1, r)
                    continue
                self.n_com -= 1  # commit done: emit the canvas
                self.s_com -= r.ctx0
                r.steps += 1
                r.committing = False
                r.block += 1
                r.ctx0 += C
                r.emitted = min(r.n_out, C * r.block)
                self.first_output(r, t)
                if r.block >= self.nblocks[r.rid]:
                    self.finish(r, t, r.ctx0)
                else:
                    self._denoise(r, s)

    def _denoise(self, r, s: int) -> None:
        r.dec_start = s + 1
        self.n_den += 1
        self.s_den += r.ctx0
        self.push(s + self.k[self.kofs[r.rid] + r.block], r)

    def enter_decode(self, r, s: int, t: float) -> None:
        r.ctx0 = r.prefill_len
        r.committing = False
        self._denoise(r, s)

    def drop_decoder(self, r, s: int) -> None:
        """Committed canvases stay emitted; the canvas in progress restarts from noise."""
        if r.committing:
            self.n_com -= 1
            self.s_com -= r.ctx0
        else:
            self.n_den -= 1
            self.s_den -= r.ctx0
            r.steps += s - r.dec_start
        self.kv_used -= r.ctx0
        r.committing = False
        r.prefill_len = r.ctx0


REPLICAS = {"diffusion": DiffusionReplica, "ar": ArReplica, "mtp": MtpReplica}


def replica_class(mode: str):
    try:
        return REPLICAS[mode]
    except KeyError:
        raise UserError(f"unknown mode {mode!r}", f"use one of {', '.join(REPLICAS)}") from None
