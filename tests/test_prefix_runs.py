"""A shared system prompt's blocks counted as one run (simulate/kvcache.py SharedRun) give exactly the
answers of counting every block: random admissions, prefills, releases and evictions replayed on
both caches agree on every hit, shared and moved token, held token, the free queue's order and
what is cached."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from simulate.kvcache import PrefixCache
from simulate.prefix import block_hashes, plain
from simulate.request import Request


class BlockByBlock:
    """The per-block reference: every held block one reference count (the cache before SharedRun)."""

    def __init__(self, block_size, unit=None):
        self.bs = int(unit or block_size)
        self.align = max(1, int(block_size) // self.bs)
        self.drop_last = False
        self.ref, self.free = {}, OrderedDict()
        self.hit_tokens = self.evicted_blocks = 0

    def lookup(self, hashes, num_tokens):
        n, i = min(len(hashes), (num_tokens - 1) // self.bs), 0
        while i < n and hashes[i] in self.ref:
            i += 1
        if self.drop_last and i:
            i -= 1
        return i - i % self.align

    def shared_tokens(self, hashes, blocks):
        return sum(self.ref[hashes[i]] > 0 for i in range(blocks)) * self.bs

    def acquire(self, r, blocks):
        r.refs, moved = r.refs or [], 0
        for h in r.hashes[:blocks]:
            if self.ref[h] == 0:
                del self.free[h]
                moved += self.bs
            self.ref[h] += 1
            r.refs.append(h)
        r.ncached = blocks
        self.hit_tokens += blocks * self.bs
        return moved

    def insert(self, r, upto):
        end = min(len(r.hashes), upto // (self.bs * self.align) * self.align)
        if end <= r.ncached:
            return
        r.refs = r.refs or []
        for h in r.hashes[r.ncached:end]:
            c = self.ref.get(h)
            if c is None or c == 0:
                if c == 0:
                    del self.free[h]
                self.ref[h] = 1
                r.refs.append(h)
        r.ncached = end

    def release(self, r):
        held = 0
        for h in reversed(r.refs or ()):
            self.ref[h] -= 1
            if self.ref[h]:
                held += self.bs
            else:
                self.free[h] = None
        r.refs, r.ncached = None, 0
        return held

    def evict(self, room):
        n = len(self.free) - max(0, room)
        for _ in range(max(0, n)):
            h, _ = self.free.popitem(last=False)
            del self.ref[h]
        self.evicted_blocks += max(0, n)


@pytest.mark.parametrize("block, unit, drop_last, seed", [(16, None, False, 0), (16, None, True, 1), (128, 64, False, 2), (16, None, False, 3)])
def test_a_shared_prompt_counted_as_a_run_answers_as_every_block_counted(block, unit, drop_last, seed):
    rng = np.random.default_rng(seed)
    new, ref = PrefixCache(block, unit), BlockByBlock(block, unit)
    new.drop_last = ref.drop_last = drop_last
    bs = new.bs
    system = [(0, 1000), (1, 300), (2, 40)]  # two apps' system prompts and one shorter than a few blocks
    live: dict = {}  # rid -> (new's request, reference's request, prompt tokens)
    for rid in range(3000):
        op = rng.random()
        if op < 0.45 or not live:  # an admission: lookup, shared tokens, acquire, then the prompt's first chunk
            app, tokens = system[rng.integers(len(system))]
            prompt = int(tokens + rng.integers(1, 400))
            hashes = block_hashes(plain(rid, prompt, int(rng.integers(1, 200)), (app, tokens) if rng.random() < 0.9 else None), bs)
            a, b = Request(rid, 0.0, prompt, 1), Request(rid, 0.0, prompt, 1)
            a.hashes, b.hashes = hashes, list(hashes)
            hit = new.lookup(a.hashes, prompt)
            assert hit == ref.lookup(b.hashes, prompt)
            assert new.shared_tokens(a.hashes, hit) == ref.shared_tokens(b.hashes, hit)
            if hit:
                assert new.acquire(a, hit) == ref.acquire(b, hit)
            chunk = hit * bs + int(rng.integers(0, prompt))
            new.insert(a, chunk)
            ref.insert(b, chunk)
            live[rid] = (a, b, prompt)
        elif op < 0.7:  # a prefill chunk, or the rest of the prompt
            k = list(live)[rng.integers(len(live))]
            a, b, prompt = live[k]
            upto = prompt if rng.random() < 0.5 else int(rng.integers(0, prompt + 1))
            new.insert(a, upto)
            ref.insert(b, upto)
        elif op < 0.92:  # a finish (or a preemption): the prompt cached, the blocks released
            k = list(live)[rng.integers(len(live))]
            a, b, prompt = live.pop(k)
            new.insert(a, prompt)
            ref.insert(b, prompt)
            assert new.release(a) == ref.release(b)
        else:
            room = int(rng.integers(0, 400))
            new.evict(room)
            ref.evict(room)
        assert list(new.free) == list(ref.free)
        assert new.ref.keys() == ref.ref.keys()
    assert (new.hit_tokens, new.evicted_blocks) == (ref.hit_tokens, ref.evicted_blocks)
    assert new.hit_tokens > 0 and new.evicted_blocks > 0 and any(r.top for r in new.runs.values())  # every path was taken
