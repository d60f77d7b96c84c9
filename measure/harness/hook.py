"""Instrumentation of transformers' own DiffusionGemma `generate`, without changing a decision.

`DiffusionInstrument` installs instance-level wrappers (removed on exit) around three internals of
`DiffusionGemmaGenerationMixin.generate` that bracket every pass:
- `_prepare_encoder_inputs` returns right before an encoder forward (the prompt prefill, or the
  commit pass over the previous canvas): a start mark;
- `_prepare_denoiser_inputs` is called right after it: the end mark, and a new canvas begins;
- `_denoising_step` is one denoising step: the decoder pass (its `decoder_forward` argument is
  wrapped for its own marks), the sampler and the stop test.
The commit hook is a proxy handed to `_denoising_step` in place of the `EntropyBoundSampler`: its
`accept_canvas` calls the sampler's own (eager, or the compiled one transformers cached) with the
same arguments, returns its result untouched, and keeps a clone of the accepted-position mask and a
reference to the logits it saw. After the step's end mark the hook queues, on the GPU, the entropy
of every canvas position from those logits (the sampler's own `Categorical(logits).entropy()`
formula, in one fused reduction kernel on CUDA via torch.compile); nothing is copied to the host
until `collect()` after the generation, so the hook adds no synchronisation to the loop (the
first version read the mask and entropies every step and cost 1.1 ms per step on the H200, 1.7%).
No random number is drawn and no tensor the loop uses is written, so a seeded generation is
identical hooked and unhooked (tests/test_measure_diffusion.py; hook-overhead units on the GPU).

Replay (measure.harness.replay) is the one deliberate intervention: after a row's scheduled k_b
steps the wrapper sets that row in the loop's `finished_denoising`, which is exactly what
transformers' stop test does when it fires.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from measure.harness.kinds import CanvasKinds, program_mode
from measure.harness.timing import Mark, PassTimer

WRAPPED = ("_prepare_encoder_inputs", "_prepare_denoiser_inputs", "_denoising_step")
_ENTROPY: dict[str, object] = {}


def entropy_nats(logits):
    """Per-position entropy, as `torch.distributions.Categorical(logits=logits).entropy()` computes it."""
    import torch  # optional heavy dependency (the measure extra)

    x = logits.float()
    lp = x - x.logsumexp(-1, keepdim=True)
    return -(lp.clamp(min=torch.finfo(lp.dtype).min) * lp.exp()).sum(-1)


def position_entropy(logits):
    """`entropy_nats`, compiled to one fused reduction on CUDA (eager elsewhere, and on CUDA too if
    compiling it fails: the same formula, a few more kernels)."""
    dev = logits.device.type
    if dev not in _ENTROPY:
        import torch  # optional heavy dependency (the measure extra)

        _ENTROPY[dev] = torch.compile(entropy_nats, dynamic=True) if dev == "cuda" else entropy_nats
    try:
        return _ENTROPY[dev](logits)
    except Exception as e:  # a compiler failure must not stop the measurement
        warnings.warn(f"compiled entropy failed ({type(e).__name__}: {str(e)[:120]}); using the eager formula")
        _ENTROPY[dev] = entropy_nats
        return entropy_nats(logits)


def sampler_owner(fn, default):
    """The sampler instance whose `accepted_token_mask` `fn` writes: the bound instance of the
    eager method, or of the method transformers compiled (`torch.compile` keeps it as `__wrapped__`)."""
    f, seen = fn, 0
    while f is not None and seen < 8:
        if getattr(f, "__self__", None) is not None and hasattr(f.__self__, "accepted_token_mask"):
            return f.__self__
        f, seen = getattr(f, "__wrapped__", None), seen + 1
    return default


class _SamplerHook:
    """Stands in for the sampler inside one `_denoising_step` call (see module doc)."""

    def __init__(self, sampler):
        self._sampler = sampler
        self.mask = None
        self.logits = None

    def accept_canvas(self, current_canvas, denoiser_canvas, logits, cur_step):
        out = self._sampler.accept_canvas(current_canvas, denoiser_canvas, logits, cur_step)
        self.mask = sampler_owner(self._sampler.accept_canvas, self._sampler).accepted_token_mask.clone()
        self.logits = logits
        return out

    def __getattr__(self, name):
        return getattr(self._sampler, name)


@dataclass
class EncoderPass:
    kind: str  # the canvas mode's prefill or commit kind
    canvas: int  # the canvas decoded after this pass
    tokens: int
    context: int
    start: Mark
    end: Mark | None = None


@dataclass
class StepPass:
    canvas: int
    call: int  # accept_canvas call index within the canvas, from 0
    cur_step: int  # the sampler's cur_step (steps remaining, N..1)
    start: Mark
    end: Mark
    fwd_start: Mark
    fwd_end: Mark
    active: object  # rows still denoising before this step (bool, B): a device tensor until collect()
    accepted: object = None  # (B, C) bool mask of this call (device tensor until collect())
    entropy: object = None  # (B, C) entropy of every position at this call, nats (device tensor until collect())


@dataclass
class GenerationTrace:
    """Everything one instrumented `generate` call produced, resolved to host values."""

    batch: int
    prompt_tokens: int
    canvas_length: int
    passes: list[dict]  # passes-table rows (without roofline columns)
    commits: list[dict]  # per (row, canvas, call): commits-table rows with row index in "row"
    canvases: list[dict]  # per (row, canvas) generated: steps, final tokens, eos positions
    steps: int  # denoising steps run (all canvases)


class DiffusionInstrument:
    """Context manager that instruments one DiffusionGemma model (see module doc)."""

    def __init__(self, model, timer: PassTimer, record_commits: bool = True, kinds: CanvasKinds | None = None):
        self.model = model
        self.kinds = kinds or CanvasKinds.of(program_mode("canvas"))  # the measured mode's passes (default: the first canvas mode's)
        self.timer = timer
        self.record_commits = record_commits
        self.profiler = None  # a torch.profiler.profile to run over a step range
        self.profile_range: tuple[int, int] | None = None  # global step indices [first, last]
        self._orig: dict = {}
        self._reset(0, 0, None)

    # -- install / remove --------------------------------------------------------------------------
    def __enter__(self) -> "DiffusionInstrument":
        for name in WRAPPED:
            self._orig[name] = getattr(self.model, name)
        self.model._prepare_encoder_inputs = self._encoder_inputs
        self.model._prepare_denoiser_inputs = self._denoiser_inputs
        self.model._denoising_step = self._denoising_step
        return self

    def __exit__(self, *exc) -> None:
        for name in WRAPPED:
            if name in self.model.__dict__:
                delattr(self.model, name)
        self._orig.clear()

    # -- per generation ---------------------------------------------------------------------------
    def _reset(self, batch: int, prompt_tokens: int, replay_steps) -> None:
        self.batch, self.prompt_tokens = batch, prompt_tokens
        self.replay_steps = replay_steps  # list over rows of per-canvas k_b, or None
        self.encoder: list[EncoderPass] = []
        self.steps: list[StepPass] = []
        self.canvas = -1
        self.call = 0
        self._k = self._done = None
        self.global_step = 0

    def start(self, batch: int, prompt_tokens: int, replay_steps: list[list[int]] | None = None) -> None:
        """Arm for the next `generate` over `batch` rows of `prompt_tokens` tokens."""
        self._reset(batch, prompt_tokens, replay_steps)

    def _encoder_inputs(self, *args, **kwargs):
        out = self._orig["_prepare_encoder_inputs"](*args, **kwargs)
        ids = out[0]
        C = self.model.config.canvas_length
        prefill = bool(kwargs.get("is_prefill", not self.encoder))
        nxt = self.canvas + 1
        ctx = 0 if prefill else self.prompt_tokens + C * (nxt - 1)
        self.encoder.append(EncoderPass(self.kinds.prefill if prefill else self.kinds.commit, nxt, int(ids.shape[1]), ctx, self.timer.mark()))
        return out

    def _denoiser_inputs(self, *args, **kwargs):
        if self.encoder and self.encoder[-1].end is None:
            self.encoder[-1].end = self.timer.mark()
        self.canvas += 1
        self.call = 0
        out = self._orig["_prepare_denoiser_inputs"](*args, **kwargs)
        if self.replay_steps is not None:
            import torch  # optional heavy dependency (the measure extra)

            dev = out[0].device
            self._k = torch.tensor([ks[min(self.canvas, len(ks) - 1)] for ks in self.replay_steps], device=dev)
            self._done = torch.zeros_like(self._k)
        return out

    def _denoising_step(self, **kwargs):
        timer = self.timer
        marks: dict[str, Mark] = {}
        decoder_forward = kwargs["decoder_forward"]

        def timed_decoder(*a, **kw):
            marks["fwd_start"] = timer.mark()
            res = decoder_forward(*a, **kw)
            marks["fwd_end"] = timer.mark()
            return res

        hook = _SamplerHook(kwargs["sampler"])
        active = ~kwargs["finished_denoising"]  # a new tensor: the loop updates finished_denoising in place
        kwargs.update(decoder_forward=timed_decoder, sampler=hook)
        if self.profiler is not None and self.profile_range and self.global_step == self.profile_range[0]:
            self.profiler.start()
        start = timer.mark()
        out = self._orig["_denoising_step"](**kwargs)
        end = timer.mark()
        if self.profiler is not None and self.profile_range and self.global_step == self.profile_range[1]:
            self.profiler.stop()
            self.profiler = None
        if self._k is not None:  # replay: stop each row after its scheduled steps
            self._done += active.to(self._done.dtype)
            out[3].logical_or_(self._done >= self._k)
        rec = StepPass(self.canvas, self.call, int(kwargs["cur_step"]), start, end, marks["fwd_start"], marks["fwd_end"], active)
        if self.record_commits and hook.mask is not None:
            rec.accepted = hook.mask
            rec.entropy = position_entropy(hook.logits)
        hook.logits = None
        self.steps.append(rec)
        self.call += 1
        self.global_step += 1
        return out

    # -- results ----------------------------------------------------------------------------------
    def collect(self, sequences, stop_token_ids: list[int], special_token_ids: list[int]) -> GenerationTrace:
        """Resolve marks (one synchronize) and build the pass, commit and canvas records.
        `stop_token_ids`: the EOS ids generate stopped on (a row that emitted one is not recorded in
        later canvases); `special_token_ids`: EOS and pad ids listed in `eos_positions`."""
        self.timer.sync()
        B, P, C = self.batch, self.prompt_tokens, self.model.config.canvas_length
        for s in self.steps:  # one host copy per tensor, after the generation
            s.active = s.active.cpu().numpy()
            if s.accepted is not None:
                s.accepted = s.accepted.cpu().numpy()
                s.entropy = s.entropy.float().cpu().numpy()
        passes = self._pass_rows(B, P, C)
        commits, canvases = self._commit_rows(sequences.detach().cpu().numpy(), stop_token_ids, set(special_token_ids), B, P, C)
        return GenerationTrace(B, P, C, passes, commits, canvases, len(self.steps))

    def _pass_rows(self, B: int, P: int, C: int) -> list[dict]:
        """One `passes` row per timed encoder pass and denoising step."""
        passes: list[dict] = []
        for e in self.encoder:
            if e.end is None:
                continue
            gpu, wall = self.timer.ms(e.start, e.end)
            passes.append({"pass_kind": e.kind, "seqs": B, "tokens_per_seq": e.tokens, "context_tokens": e.context,
                           "gpu_ms": gpu, "wall_ms": wall, "forward_gpu_ms": gpu, "canvas": e.canvas, "call": -1, "cur_step": -1,
                           "active_seqs": B, "prompt_tokens": P})
        for s in self.steps:
            gpu, wall = self.timer.ms(s.start, s.end)
            fwd, _ = self.timer.ms(s.fwd_start, s.fwd_end)
            passes.append({"pass_kind": self.kinds.denoise, "seqs": B, "tokens_per_seq": C, "context_tokens": P + C * s.canvas,
                           "gpu_ms": gpu, "wall_ms": wall, "forward_gpu_ms": fwd, "canvas": s.canvas, "call": s.call,
                           "cur_step": s.cur_step, "active_seqs": int(s.active.sum()), "prompt_tokens": P})
        return passes

    def _commit_rows(self, seq, stop_token_ids: list[int], special: set, B: int, P: int, C: int) -> tuple[list[dict], list[dict]]:
        """(`commits` rows per step and row, `canvases` rows per canvas and row) from the recorded acceptances
        and the final sequences `seq`; a row that emitted a stop token is not recorded in later canvases."""
        n_canvases = max((s.canvas for s in self.steps), default=-1) + 1
        ended = np.zeros(B, dtype=bool)  # the row's sequence hit EOS in an earlier canvas
        commits: list[dict] = []
        canvases: list[dict] = []
        for c in range(n_canvases):
            tokens = seq[:, P + C * c: P + C * (c + 1)]
            steps_c = [s for s in self.steps if s.canvas == c]
            for r in range(B):
                if ended[r]:
                    continue
                ever = np.zeros(C, dtype=bool)
                prev = np.zeros(C, dtype=bool)
                n_steps = 0
                for s in steps_c:
                    if not s.active[r]:
                        continue
                    n_steps += 1
                    if s.accepted is None:
                        continue
                    acc = s.accepted[r]
                    commits.append({"row": r, "canvas": c, "call": s.call, "cur_step": s.cur_step,
                                    "accepted_positions": np.flatnonzero(acc).tolist(),
                                    "accepted_entropy": s.entropy[r][acc].astype(float).tolist(),
                                    "new_positions": np.flatnonzero(acc & ~ever).tolist(),
                                    "renoised_positions": np.flatnonzero(prev & ~acc).tolist()})
                    ever |= acc
                    prev = acc
                row_tokens = tokens[r] if tokens.shape[1] == C else np.empty(0, dtype=np.int64)
                eos_pos = [int(i) for i, t in enumerate(row_tokens) if int(t) in special]
                canvases.append({"row": r, "canvas": c, "steps": n_steps, "final_tokens": row_tokens.astype(int).tolist(),
                                 "eos_positions": eos_pos, "content_length": int(eos_pos[0]) if eos_pos else int(len(row_tokens))})
            if stop_token_ids and tokens.size:
                ended |= np.isin(tokens, list(stop_token_ids)).any(axis=1)
        return commits, canvases
