"""Per-request progress and the per-mode random draws, made vectorised before the run starts.

A `Request` is a slotted record the engine mutates in place; the engine never loops over running
requests per step (see engine.py), so a request only records where its current phase started and
the engine derives its progress from the replica's step counter.

Per-mode draws (fixed by the seed, independent of the load, the replica count and the order in
which the engine happens to serve requests):
- diffusion: `k` (denoising steps) for every canvas. A canvas holding x content tokens takes the
  steps_per_canvas quantile at x's quantile under the regime's per-canvas content distribution
  (a randomised probability-integral transform: u = F(x-) + v * P(x), v uniform). So a longer
  canvas takes more steps (the commit-order study: accept-calls "track content length"), and when
  lengths follow the regime's content_length, k's marginal is exactly steps_per_canvas.
- mtp: tokens emitted per verify step (1 + accepted drafts), drawn from the distribution that
  `MtpAcceptance.per_position` defines (the same one `sample_accepted` draws from: drafts accepted
  = the leading run of successes), one region of draws per request.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from simulate.workload import Requests, rng_for

STREAM_CANVAS_STEPS, STREAM_MTP, STREAM_MTP_EXTRA = 11, 12, 13
# MTP draws per request: enough verify steps for twice the expected count plus slack; a request
# that needs more (astronomically rare) extends its own region from a per-request stream.
MTP_REGION_FACTOR, MTP_REGION_SLACK = 2.0, 16


class Request:
    """Progress of one request on one replica. Times in seconds on the simulation clock."""

    __slots__ = (
        "rid", "prompt", "n_out", "arrival_s", "emitted", "prefill_len", "prefill_done", "epoch",
        "dec_start", "ctx0", "steps", "preemptions", "started", "first", "replica",
        "block", "committing", "cum", "mpos",
    )

    def __init__(self, rid: int, arrival_s: float, prompt: int, n_out: int):
        self.rid = rid
        self.arrival_s = arrival_s
        self.prompt = prompt
        self.n_out = n_out
        self.emitted = 0  # output tokens emitted so far
        self.prefill_len = prompt  # tokens the next (re)prefill must compute
        self.prefill_done = 0
        self.epoch = 0  # bumped on preemption: scheduled events of an older epoch are void
        self.dec_start = 0  # step index of the first step of the current decode phase
        self.ctx0 = 0  # context (KV tokens) at dec_start
        self.steps = 0  # engine steps this request took part in
        self.preemptions = 0
        self.started = False
        self.first = False  # first output emitted
        self.replica = -1
        self.block = 0  # diffusion: index of the canvas being denoised/committed
        self.committing = False  # diffusion: in its commit step
        self.cum = None  # mtp: own cumulative tokens per verify step, only once its shared region ran out
        self.mpos = 0  # mtp: verify steps consumed from its draws


def canvas_length(profile: Profile) -> int:
    from costmodel.models import get_model

    return int(get_model(profile.mode("diffusion").model).canvas_length or 256)


class DiffusionPlan:
    """k for every canvas of every request: `k[kofs[rid] + b]` for canvas b of request rid."""

    def __init__(self, profile: Profile, reqs: Requests, seed: int):
        self.canvas = C = canvas_length(profile)
        out = reqs.output_tokens
        blocks = np.maximum(1, -(-out // C))
        self.blocks = blocks
        ofs = np.zeros(len(out) + 1, dtype=np.int64)
        np.cumsum(blocks, out=ofs[1:])
        total = int(ofs[-1])
        # content of each canvas: C for full canvases, the remainder for the last
        b_idx = np.arange(total) - np.repeat(ofs[:-1], blocks)
        last = b_idx == np.repeat(blocks - 1, blocks)
        content = np.where(last, np.repeat(out - C * (blocks - 1), blocks), C)
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

    def kv_need(self, reqs: Requests) -> np.ndarray:
        """KV tokens a request holds at its end: prompt + every committed canvas."""
        return reqs.prompt_tokens + self.canvas * self.blocks


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


def mtp_tokens_pmf(per_position, k: int) -> np.ndarray:
    """P(tokens per verify step = 1 + j), j = 0..k: j drafts accepted then one rejected (or all k)."""
    a = np.asarray(per_position[:k], float)
    pmf = np.empty(k + 1)
    run = 1.0
    for j in range(k):
        pmf[j] = run * (1.0 - a[j])
        run *= a[j]
    pmf[k] = run
    return pmf


class MtpPlan:
    """Tokens per verify step for every request, as a cumulative count per request region."""

    def __init__(self, profile: Profile, reqs: Requests, seed: int):
        acc = profile.mtp_acceptance
        if acc is None:
            raise UserError(f"profile {profile.profile_id} has no mtp_acceptance", "use a profile with MTP acceptance for mode mtp")
        self.k = k = int(acc.num_speculative_tokens)
        self.mean_tokens = float(acc.mean_acceptance_length)
        self.cdf = np.cumsum(mtp_tokens_pmf(acc.per_position, k))
        self.cdf[-1] = 1.0
        self.seed = seed
        need = np.maximum(reqs.output_tokens - 1, 0)
        region = np.minimum(need, np.ceil(MTP_REGION_FACTOR * need / self.mean_tokens).astype(np.int64) + MTP_REGION_SLACK)
        self.start = np.zeros(len(need) + 1, dtype=np.int64)
        np.cumsum(region, out=self.start[1:])
        self.start = self.start.tolist()
        draws = self._draw(rng_for(seed, STREAM_MTP), self.start[-1])
        self.csum = np.zeros(len(draws) + 1, dtype=np.int64)
        np.cumsum(draws, out=self.csum[1:])

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return 1 + np.searchsorted(self.cdf, rng.random(n), side="right").clip(0, self.k)

    def steps_for(self, r: Request, tokens: int) -> int:
        """Verify steps from r's current position until `tokens` more tokens are emitted."""
        if r.cum is None:
            a = self.start[r.rid] + r.mpos
            target = int(self.csum[a]) + tokens
            if int(self.csum[self.start[r.rid + 1]]) >= target:
                return int(np.searchsorted(self.csum, target, side="left")) - a
            a0 = self.start[r.rid]
            r.cum = self.csum[a0:self.start[r.rid + 1] + 1] - self.csum[a0]
        cum = r.cum
        target = int(cum[r.mpos]) + tokens
        while int(cum[-1]) < target:  # region exhausted: extend from this request's own stream
            extra = self._draw(rng_for(self.seed, STREAM_MTP_EXTRA * 1_000_003 + r.rid * 7919 + len(cum)), max(16, tokens))
            cum = r.cum = np.concatenate([cum, cum[-1] + np.cumsum(extra)])
        return int(np.searchsorted(cum, target, side="left")) - r.mpos

    def tokens_after(self, r: Request, steps: int) -> int:
        """Tokens emitted by the next `steps` verify steps from r's current position."""
        if r.cum is None:
            a = self.start[r.rid] + r.mpos
            return int(self.csum[a + steps] - self.csum[a])
        return int(r.cum[r.mpos + steps] - r.cum[r.mpos])

    def kv_need(self, reqs: Requests) -> np.ndarray:
        return reqs.prompt_tokens + reqs.output_tokens + self.k + 1


def check_fits(kv_need: np.ndarray, capacity: int, mode: str) -> None:
    """Every request must fit the KV cache alone, or it could never finish (vLLM refuses such
    requests too)."""
    if len(kv_need) and int(kv_need.max()) > capacity:
        i = int(np.argmax(kv_need))
        raise UserError(f"request {i} needs {int(kv_need[i]):,} KV tokens in mode {mode}, more than the KV cache holds ({capacity:,} tokens)",
                        "shorten prompts/outputs, or give more memory (--gpu-memory-utilization) or a GPU with more")
