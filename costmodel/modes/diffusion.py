"""Block diffusion (DiffusionGemma-26B-A4B), vLLM's DiffusionGemma data path: after its prefill, a
request denoises its canvas for k steps (one denoise forward of 256 query tokens per engine step),
then the next engine step is its commit pass (encoder_commit, 256 tokens, writes the canvas's KV)
whose end emits the canvas's tokens (256, the last canvas the remainder): k+1 engine steps per
canvas, the last one included. Its first output is the end of the first commit. Requests are not
synchronised: one engine step mixes prefill chunks, denoising canvases and commits in one forward.

Draws: `k` (denoising steps) for every canvas. A canvas holding x content tokens takes the
steps_per_canvas quantile at x's quantile under the regime's per-canvas content distribution (a
randomised probability-integral transform: u = F(x-) + v * P(x), v uniform). So a longer canvas
takes more steps (the commit-order study: accept-calls "track content length"), and when lengths
follow the regime's content_length, k's marginal is exactly steps_per_canvas."""

from __future__ import annotations

import numpy as np

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ServingMode, steps_within
from costmodel.seeding import rng_for

STREAM_CANVAS_STEPS = 11


def canvas_length(profile) -> int:
    profile.mode("diffusion")
    return int(profile.resolved().models["diffusion"].canvas_length or 256)


def canvas_content_distribution(content_length, C: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-canvas content (values, probs) implied by per-generation content lengths: a generation of
    L tokens fills L // C canvases and leaves L % C in its last."""
    acc: dict[int, float] = {}
    for L, p in zip(content_length.values, content_length.probs):
        L = int(round(L))
        full, rem = divmod(max(L, 1), C)
        if full:
            acc[C] = acc.get(C, 0.0) + p * full
        if rem:
            acc[rem] = acc.get(rem, 0.0) + p
    vals = np.array(sorted(acc), dtype=np.int64)
    probs = np.array([acc[v] for v in vals], float)
    return vals, probs / probs.sum()


def _coupled_steps(cs, C: int, content: np.ndarray, v: np.ndarray) -> np.ndarray:
    cvals, cprobs = canvas_content_distribution(cs.content_length, C)
    ccdf = np.cumsum(cprobs)
    below = np.searchsorted(cvals, content, side="left")  # values < x
    f_minus = np.where(below > 0, ccdf[np.maximum(below - 1, 0)], 0.0)
    at = (below < len(cvals)) & (cvals[np.minimum(below, len(cvals) - 1)] == content)
    p_x = np.where(at, cprobs[np.minimum(below, len(cvals) - 1)], 0.0)
    u = np.clip(f_minus + v * p_x, 0.0, 1.0)
    svals = np.asarray(cs.steps_per_canvas.values, float)
    order = np.argsort(svals)
    scdf = np.cumsum(np.asarray(cs.steps_per_canvas.probs, float)[order])
    scdf[-1] = 1.0
    idx = np.minimum(np.searchsorted(scdf, u, side="left"), len(scdf) - 1)
    return np.maximum(1, np.rint(svals[order][idx])).astype(np.int64)


def replayed_steps(recorded, blocks: np.ndarray) -> list[int]:
    """Denoising steps of every canvas from an engine's record (one list per request); a request
    recorded with fewer canvases than its output needs (cut off) repeats its last count."""
    if len(recorded) != len(blocks):
        raise UserError(f"recorded steps per canvas cover {len(recorded)} requests, the run has {len(blocks)}", "replay the requests the record belongs to")
    ks: list[int] = []
    for steps, b in zip(recorded, blocks.tolist()):
        steps = [max(1, int(x)) for x in steps][:b] or [1]
        ks.extend(steps + [steps[-1]] * (b - len(steps)))
    return ks


class DiffusionDraws(ModeDraws):
    """k for every canvas of every request: `k[kofs[rid] + b]` for canvas b of request rid."""

    def __init__(self, profile, reqs, seed: int):
        self.canvas = C = canvas_length(profile)
        out = reqs.output_tokens
        blocks = np.maximum(1, -(-out // C))
        # KV a request holds at its end: prompt + every committed canvas
        super().__init__(group_tokens=(C, C), kv_need_tokens=reqs.prompt_tokens + C * blocks, blocks=blocks, price_key=(C,))
        ofs = np.zeros(len(out) + 1, dtype=np.int64)
        np.cumsum(blocks, out=ofs[1:])
        total = int(ofs[-1])
        # content of each canvas: C for full canvases, the remainder for the last
        b_idx = np.arange(total) - np.repeat(ofs[:-1], blocks)
        last = b_idx == np.repeat(blocks - 1, blocks)
        content = np.where(last, np.repeat(out - C * (blocks - 1), blocks), C)
        recorded = (getattr(reqs, "recorded", None) or {}).get("steps_per_canvas")
        if recorded is not None:  # an engine's own steps per canvas, replayed (validate/vllm)
            self.k = replayed_steps(recorded, blocks)
            self.kofs = ofs[:-1].tolist()
            self.blocks_list = blocks.tolist()
            return
        regime = np.repeat(reqs.regime_idx, blocks)
        v = rng_for(seed, STREAM_CANVAS_STEPS).random(total)
        ks = np.empty(total, dtype=np.int64)
        for i, name in enumerate(reqs.regimes):
            sel = regime == i
            if not sel.any():
                continue
            cs = profile.commit_stats.get(name)
            if cs is None:
                raise UserError(f"regime {name!r} has no commit statistics in profile {profile.profile_id}",
                                f"use one of {', '.join(sorted(profile.commit_stats))}")
            ks[sel] = _coupled_steps(cs, C, content[sel], v[sel])
        self.k = ks.tolist()
        self.kofs = ofs[:-1].tolist()
        self.blocks_list = blocks.tolist()


class DiffusionEngine:
    """Replica mixin. Counters for denoising canvases (n_den, s_den) and commits (n_com, s_com)."""

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
        m, tp, psum = self.schedule_prefill(self.budget - C * (nd + nc), self.now)
        dt = self.price(m, tp, psum, (nd, nc), (self.s_den, self.s_com))
        self.account(dt, m, tp, (nd, nc))
        return dt

    def coast(self, t: float, bound: float, prev: float):
        """Run, in closed form, the steps from t in which nothing is prefilled, admitted or preempted
        (one price: the counters do not move), up to and including the next step that ends with a
        canvas finishing its denoising or commit; the one that ends past `bound` (or that step) is
        left in flight (Replica.advance, book_run). Returns the time a full step must start at, or
        None when a step is in flight."""
        nd, nc = self.n_den, self.n_com
        if not (nd or nc) or self.prefilling:
            return t
        s, due = self.step, self.next_due()
        grow = self.C * nc
        # steps before the commits' KV growth needs a preemption (denoising canvases write none)
        steps = steps_within(self.kv_cap - self.kv_reserved - grow - self.kv_used, grow) if nc else float("inf")
        steps = min(steps, self.head_admitted_at(self.C * (nd + nc), grow) - s)  # an admission is a full step
        last_due = due - s + 1 <= steps
        if last_due:
            steps = due - s + 1
        if steps <= 0 or steps == float("inf"):
            return t
        dt = self.price(0, 0, 0, (nd, nc), (self.s_den, self.s_com))
        return self.book_run(t, bound, prev, ((int(steps), dt),), last_due, grow, (nd, nc))[0]

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events.pop(s, None)
        if ev:
            for r, ep in ev:
                if ep != r.epoch:
                    continue
                if r.block >= self.nblocks[r.rid]:  # its wasted denoise step after the last commit (async)
                    self.n_den -= 1
                    self.s_den -= r.ctx0
                    r.steps += 1
                    self.release(r, r.ctx0)
                elif r.committing:
                    self._emit(r, s, t)
                else:  # k denoising steps done: the next step is the commit pass
                    self.n_den -= 1
                    self.s_den -= r.ctx0
                    self.n_com += 1
                    self.s_com += r.ctx0
                    r.steps += s - r.dec_start + 1
                    r.committing = True
                    r.dec_start = s + 1
                    self.push(s + 1, r)

    def _emit(self, r, s: int, t: float) -> None:
        """Commit done: emit the canvas; finish, or start denoising the next one."""
        self.n_com -= 1
        self.s_com -= r.ctx0
        r.steps += 1
        r.committing = False
        r.block += 1
        r.ctx0 += self.C
        r.emitted = min(r.n_out, self.C * r.block)
        self.first_output(r, t)
        if r.block < self.nblocks[r.rid]:
            self._denoise(r, s)
        elif self.async_sched:
            # vLLM's DiffusionAsyncScheduler scheduled step s+1 before this commit's output was read, with
            # r as a denoising canvas (the max_tokens guard does not fire on a final commit,
            # vllm/v1/core/sched/diffusion_scheduler.py): r finishes now, its canvas and slot go after s+1
            self.record_finish(r, t)
            self.n_den += 1
            self.s_den += r.ctx0
            r.dec_start = s + 1
            self.push(s + 1, r)
        else:
            self.finish(r, t, r.ctx0)

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


class DiffusionMode(ServingMode):
    name = "diffusion"
    label = "DiffusionGemma"
    description = "DiffusionGemma-26B-A4B block diffusion"
    order = 0
    line_style = ("-", "o")
    model_family = "diffusion_gemma"
    default_model = "diffusiongemma-26b-a4b"
    canvas_sampler = True
    is_diffusion = True
    pass_kinds = ("encoder_prefill", "denoise_step", "encoder_commit")
    prefill_kind = "encoder_prefill"
    group_kinds = ("denoise_step", "encoder_commit")
    profile_parts = ("commit_stats",)
    sim_cost_rank = 1
    engine = DiffusionEngine

    def kv_step_slots(self, k: int, canvas: int) -> int:
        """The active canvas holds its slots from its first denoising step."""
        return canvas

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        return canvas

    def draw(self, profile, reqs, seed: int) -> DiffusionDraws:
        return DiffusionDraws(profile, reqs, seed)
