"""AR and MTP passes through transformers' Gemma-4 forward, built from the pieces `generate` uses.

Why our own loop: transformers' assisted decoding (the Gemma-4 assistant's MTP path,
`SinglePositionMultiTokenCandidateGenerator`) runs batch 1 only, and its `generate` gives no pass
boundaries to time. The loop below calls what `generate` calls, in the same order:
`prepare_inputs_for_generation` (4-D masks built outside the compiled region for static caches),
the model's `__call__` (eager) or `get_compiled_call(CompileConfig())` (torch.compile
"reduce-overhead" over a `StaticCache`, re-used and `reset()` between generations as `generate`
keeps `model._cache`), prefill always eager, greedy token choice. MTP drafting follows the
candidate generator: the drafter reads `cat(target_embedding(last token), target last hidden state)`
at a fixed position and the target's `shared_kv_states`, one assistant pass per draft token; the
target then verifies k+1 tokens in one pass and the cache is cropped to what was accepted.

Acceptance: with a checkpoint, greedy verification (leading drafts equal to the target's argmax).
With random weights drafts are never accepted, so acceptance is drawn from a stated per-token rate
(vLLM benchmarks' synthetic 0.8 by default): draft j is accepted with that probability if every
earlier one was. A batch advances by the smallest acceptance among its rows (one rectangular
batch, as the drafts of a round share one verify pass); per-row acceptances are recorded.

Compiled MTP is timing-only: the drafter is compiled over the static cache's full KV buffers with no
mask (static shapes), and rejected drafts are rolled back by the static layers' counters, which
leaves their entries in the sliding-window buffer. Values then differ from an exact rollback, pass
shapes and costs do not; checkpoints must use the eager engine (config enforces it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from measure.harness.kinds import CausalKinds, program_mode
from measure.harness.timing import Mark, PassTimer


@dataclass
class TimedPass:
    kind: str
    seqs: int
    tokens: int
    context: int
    start: Mark
    end: Mark
    fwd_start: Mark
    fwd_end: Mark
    extra: dict = field(default_factory=dict)


def safe_token_ids(gen, batch: int, length: int, vocab: int):
    """Random prompt tokens that avoid special and multimodal ids (ids 10 .. min(vocab, 255000))."""
    import torch  # optional heavy dependency (the measure extra)

    hi = max(11, min(vocab, 255_000))
    return torch.randint(10, hi, (batch, length), generator=gen)


class CausalEngine:
    """One Gemma-4 target (and optionally its assistant) on one engine setting."""

    def __init__(self, model, engine: str, timer: PassTimer, assistant=None, kinds: CausalKinds | None = None):
        import torch  # optional heavy dependency (the measure extra)
        from transformers import CompileConfig  # optional heavy dependency (the measure extra)

        self.torch = torch
        self.model = model
        self.assistant = assistant
        self.timer = timer
        # the pass kinds it records: the measured mode's (default: the first causal mode with, or without, an assistant)
        self.kinds = kinds or CausalKinds.of(program_mode("causal", assistant is not None))
        self.compiled = engine == "compiled"
        self.device = next(model.parameters()).device
        self.forward = model.get_compiled_call(CompileConfig()) if self.compiled else model.__call__
        self.assistant_forward = None
        if assistant is not None:
            self.assistant_forward = torch.compile(assistant.__call__, mode="reduce-overhead") if self.compiled else assistant.__call__
        self.embed = model.get_input_embeddings()
        self._static: dict[tuple[int, int], object] = {}

    # -- caches -------------------------------------------------------------------------------------
    def cache(self, batch: int, max_len: int):
        """A fresh DynamicCache (eager), or the persisted StaticCache for this shape, reset (compiled)."""
        from transformers import DynamicCache, StaticCache  # optional heavy dependency (the measure extra)

        cfg = self.model.config.get_text_config(decoder=True)
        if not self.compiled:
            return DynamicCache(config=cfg)
        key = (batch, max_len)
        if key not in self._static:
            self._static[key] = StaticCache(config=cfg, max_cache_len=max_len)
        else:
            self._static[key].reset()
        return self._static[key]

    def rollback(self, cache, tokens: int) -> None:
        """Drop the last `tokens` cached positions (rejected drafts)."""
        if not self.compiled:
            cache.crop(-tokens if tokens else 0)
            return
        if not tokens:
            return
        for layer in cache.layers:
            if not getattr(layer, "is_initialized", False):
                continue
            if hasattr(layer, "cumulative_length_int"):
                full = layer.cumulative_length_int >= layer.max_cache_len
                layer.cumulative_length_int -= tokens
                if not full:
                    layer.cumulative_length.sub_(tokens)
            else:
                layer.cumulative_length.sub_(tokens)

    # -- passes ---------------------------------------------------------------------------------------
    def _inputs(self, seq, new_tokens: int, cache, first: bool, **extra):
        torch = self.torch
        B, L = seq.shape
        attn = torch.ones((B, L), dtype=torch.long, device=seq.device)
        pos = torch.arange(L - new_tokens, L, device=seq.device).unsqueeze(0).expand(B, -1)
        return self.model.prepare_inputs_for_generation(
            seq, next_sequence_length=None if first else new_tokens, past_key_values=cache, attention_mask=attn,
            position_ids=pos, use_cache=True, is_first_iteration=first, **extra)

    def prefill(self, ids, cache, mtp: bool = False):
        """Eager prefill over the prompt (transformers never compiles prefill); returns (pass, output)."""
        t = self.timer
        extra = {"output_hidden_states": True, "return_shared_kv_states": True} if mtp else {}
        start = t.mark()
        inputs = self._inputs(ids, ids.shape[1], cache, True, logits_to_keep=1, **extra)
        fs = t.mark()
        out = self.model(**inputs, return_dict=True)
        fe = t.mark()
        nxt = out.logits[:, -1].float().argmax(-1, keepdim=True)
        end = t.mark()
        B, P = ids.shape
        return TimedPass(self.kinds.prefill, B, P, 0, start, end, fs, fe), out, nxt

    def target_step(self, seq, new_tokens: int, cache, kind: str, mtp: bool = False):
        """One decode (1 new token) or verify (k+1) pass of the target; returns (pass, output, argmax ids)."""
        torch, t = self.torch, self.timer
        extra = {"output_hidden_states": True, "return_shared_kv_states": True} if mtp else {}
        B, L = seq.shape
        start = t.mark()
        inputs = self._inputs(seq, new_tokens, cache, False, **extra)
        if self.compiled:
            torch.compiler.cudagraph_mark_step_begin()
        fs = t.mark()
        out = self.forward(**inputs, return_dict=True)
        fe = t.mark()
        greedy = out.logits[:, -new_tokens:].float().argmax(-1)
        end = t.mark()
        return TimedPass(kind, B, new_tokens, L - new_tokens, start, end, fs, fe), out, greedy

    def draft_step(self, last_token, last_hidden, shared_kv, position: int, kv_tokens: int):
        """One assistant pass proposing one draft token per sequence; returns (pass, token, hidden)."""
        torch, t = self.torch, self.timer
        B = last_token.shape[0]
        start = t.mark()
        x = torch.cat([self.embed(last_token), last_hidden.to(self.embed.weight.dtype)], dim=-1)
        pos = torch.full((B, 1), position, dtype=torch.long, device=last_token.device)
        if self.compiled:
            torch.compiler.cudagraph_mark_step_begin()
            kwargs = dict(attention_mask=None)
        else:
            kwargs = dict(attention_mask=torch.ones((B, kv_tokens + 1), dtype=torch.long, device=last_token.device))
        fs = t.mark()
        out = self.assistant_forward(inputs_embeds=x, position_ids=pos, shared_kv_states=shared_kv, use_cache=False, **kwargs)
        fe = t.mark()
        tok = out.logits.argmax(-1)
        hidden = out.last_hidden_state.clone() if self.compiled else out.last_hidden_state
        end = t.mark()
        return TimedPass(self.kinds.draft, B, 1, kv_tokens, start, end, fs, fe), tok, hidden

    def shared_kv(self, out, length: int):
        """The target's shared KV for the drafter: sliced to the sequence length as transformers'
        candidate generator does (eager), or the whole static buffers, cloned off the CUDA graph (compiled)."""
        kv = out.shared_kv_states
        if self.compiled:
            return {k: (v[0].clone(), v[1].clone()) for k, v in kv.items()}
        return {k: (v[0][:, :, :length, :], v[1][:, :, :length, :]) for k, v in kv.items()}


def draw_acceptance(rng: np.random.Generator, k: int, rate: float) -> int:
    """Accepted drafts of one round at a per-token rate: leading successes, at most k."""
    n = 0
    while n < k and rng.random() < rate:
        n += 1
    return n


def greedy_acceptance(drafts, greedy) -> np.ndarray:
    """Per row: how many leading drafts equal the target's greedy choice at their position."""
    match = (drafts == greedy[:, : drafts.shape[1]]).cpu().numpy()
    return np.where(match.all(axis=1), match.shape[1], np.argmin(match, axis=1))


@dataclass
class CausalGeneration:
    passes: list[TimedPass]
    sequences: object  # token ids, prompt included
    accepted: list[int] = field(default_factory=list)  # MTP: drafts accepted per round (batch-wide)
    accepted_per_seq: list[list[int]] = field(default_factory=list)  # MTP: per round, per row


def ar_generation(engine: CausalEngine, ids, decode_steps: int, profiler=None, profile_steps: int = 0) -> CausalGeneration:
    """Prefill, then `decode_steps` one-token steps (greedy). With a profiler, it records decode steps
    2 .. 1 + profile_steps (the first decode step is left out as a warm step)."""
    torch = engine.torch
    B, P = ids.shape
    cache = engine.cache(B, P + decode_steps + 1)
    pp, _, nxt = engine.prefill(ids, cache)
    seq = torch.cat([ids, nxt], dim=1)
    passes = [pp]
    for i in range(decode_steps):
        if profiler is not None and i == 1:
            profiler.start()
        tp, _, greedy = engine.target_step(seq, 1, cache, engine.kinds.decode)
        if profiler is not None and i == profile_steps:
            profiler.stop()
            profiler = None
        passes.append(tp)
        seq = torch.cat([seq, greedy[:, -1:]], dim=1)
    if profiler is not None:
        profiler.stop()
    return CausalGeneration(passes, seq)


def mtp_generation(engine: CausalEngine, ids, k: int, rounds: int, rate: float | None, rng: np.random.Generator,
                   profiler=None, profile_rounds: int = 0, eos_ids: list[int] | None = None) -> CausalGeneration:
    """Prefill, then up to `rounds` rounds of k draft passes and one verify pass over k+1 tokens (see
    module doc for acceptance); with `eos_ids`, it stops once every row has produced one. With a
    profiler, rounds 2 .. 1 + profile_rounds are recorded."""
    torch = engine.torch
    B, P = ids.shape
    cache = engine.cache(B, P + rounds * (k + 1) + 2)
    pp, out, nxt = engine.prefill(ids, cache, mtp=True)
    if not engine.compiled:
        cache.activate_past_recording()  # as transformers' assisted decoding: crop() can roll back sliding layers
    seq = torch.cat([ids, nxt], dim=1)
    hidden = out.hidden_states[-1][:, -1:]
    skv = engine.shared_kv(out, seq.shape[1])
    gen = CausalGeneration([pp], seq)
    for r in range(rounds):
        if profiler is not None and r == 1:
            profiler.start()
        L = seq.shape[1]
        tok, h = seq[:, -1:], hidden
        drafts = []
        for _ in range(k):
            dp, tok, h = engine.draft_step(tok, h, skv, L - 1, L - 1)
            dp.extra = {"draft_tokens": k, "round": r}
            gen.passes.append(dp)
            drafts.append(tok)
        d = torch.cat(drafts, dim=1)
        vp, vout, greedy = engine.target_step(torch.cat([seq, d], dim=1), k + 1, cache, engine.kinds.decode, mtp=True)
        per_row = greedy_acceptance(d, greedy)
        if rate is not None:
            n = draw_acceptance(rng, k, rate)
            per_row = np.full(B, n)
        n = int(per_row.min())
        vp.extra = {"draft_tokens": k, "round": r, "accepted_drafts": n, "accepted_per_seq": per_row.astype(int).tolist()}
        gen.passes.append(vp)
        gen.accepted.append(n)
        gen.accepted_per_seq.append(per_row.astype(int).tolist())
        seq = torch.cat([seq, d[:, :n], greedy[:, n:n + 1]], dim=1)
        engine.rollback(cache, k - n)
        hidden = vout.hidden_states[-1][:, n:n + 1]
        hidden = hidden.clone() if engine.compiled else hidden
        skv = engine.shared_kv(vout, seq.shape[1])
        if profiler is not None and r == profile_rounds:
            profiler.stop()
            profiler = None
        if eos_ids and bool(torch.isin(seq[:, P:], torch.tensor(eos_ids, device=seq.device)).any(dim=1).all()):
            break
    if profiler is not None:
        profiler.stop()
    gen.sequences = seq
    return gen
