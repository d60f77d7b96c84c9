"""Per-request progress: a `Request` is a slotted record the engine mutates in place; the engine
never loops over running requests per step (see engine.py), so a request only records where its
current phase started and the engine derives its progress from the replica's step counter. The
per-mode random draws (denoising steps per canvas, MTP tokens per verify step) are each mode's
own (costmodel/modes), made vectorised before the run starts.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import UserError


class Request:
    """Progress of one request on one replica. Times in seconds on the simulation clock."""

    __slots__ = (
        "rid", "prompt", "n_out", "arrival_s", "emitted", "prefill_len", "prefill_done", "epoch",
        "dec_start", "ctx0", "steps", "preemptions", "started", "first", "replica",
        "block", "committing", "cum", "mpos", "eligible", "state", "hashes", "refs", "ncached", "hit", "pre",
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
        self.eligible = 0  # the first step index that may admit it (async scheduling: one step later)
        self.state = None  # a mode's own progress for this request, kept by its engine (the built-in modes use the typed fields above)
        # prefix caching (simulate/kvcache.py): its blocks' hashes (None: content shared with no other
        # request, never looked up), the hashes of the cached blocks it holds, how many of its leading
        # blocks it has cached or hit, and its first admission's hit in tokens (-1: not admitted yet);
        # `pre`: the leading blocks of a shared system prompt it holds as one holder (kvcache.SharedRun)
        self.hashes = None
        self.refs = None
        self.ncached = 0
        self.hit = -1
        self.pre = 0


def check_fits(kv_need: np.ndarray, capacity: int, mode: str) -> None:
    """Every request must fit the KV cache alone, or it could never finish (vLLM refuses such
    requests too)."""
    if len(kv_need) and int(kv_need.max()) > capacity:
        i = int(np.argmax(kv_need))
        raise UserError(f"request {i} needs {int(kv_need[i]):,} KV tokens in mode {mode}, more than the KV cache holds ({capacity:,} tokens)",
                        "shorten prompts/outputs, or give more memory (--gpu-memory-utilization) or a GPU with more")
