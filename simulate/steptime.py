"""Engine-step durations from the profile's pass cost models (the only cost source).

One engine step is prefill chunks beside any number of decode-phase groups (a mode's
`group_kinds`: AR decode tokens; diffusion denoising canvases and commits; MTP verify tokens),
priced by the mode's `step_ms` (costmodel/modes): by default one forward pass, one weight read,
through `Profile.pass_ms`; MTP adds k sequential draft passes of the assistant.

Speed: an hour of traffic has ~10^5 engine steps but a pass_ms miss costs ~100 us, so a step's
shape is reduced to a small integer key and the prices are cached. With resolution `shape_bits`
b (default 5):
- sequence counts are rounded to b significant bits (exact below 2**b = 32, within 1/2**b above);
- mean contexts to b-2 significant bits (within 1/2**(b-2) = 12.5%, rounded, so 6.25% at most;
  context is a second-order term of a pass's cost); when several groups are non-empty (a
  diffusion step's denoising and committing canvases) they are priced at their pooled mean
  context (one population of requests);
- tokens per prefill chunk are placed on a grid of b-2 significant bits and the price is
  interpolated linearly between the two neighbouring grid points (first-order accurate in the
  dominant, near-linear dimension).
Against exact pricing this is within about 1% per step on the benchmark workloads (measured in
tests/test_simulate_pricing). `shape_bits=0` prices every shape exactly (no rounding, no pooling):
the tests that compare with hand computations use it.
"""

from __future__ import annotations

import weakref

from costmodel.modes import ModeDraws, ServingMode
from costmodel.roofline import Segment
from costmodel.schemas.profile import Profile

DEFAULT_SHAPE_BITS = 5
# (id(profile), mode, bits, draws.price_key) -> (weakref to the profile, {key: seconds}); shared by
# every run in a process, so plan's repeated run_point calls on one profile reuse the prices.
_CACHES: dict = {}


def quantizer(bits: int):
    """x -> x rounded to `bits` significant bits (identity for bits <= 0 and for x < 2**bits)."""
    if bits <= 0:
        return lambda x: int(x)
    lim = 1 << bits

    def q(x: int) -> int:
        if x < lim:
            return x
        s = x.bit_length() - bits
        return ((x + (1 << (s - 1))) >> s) << s

    return q


class StepPricer:
    """Seconds of one engine step, from the prefill chunks' counts and the decode-phase groups'
    sequence counts and context sums."""

    def __init__(self, profile: Profile, mode: ServingMode, draws: ModeDraws, shape_bits: int = DEFAULT_SHAPE_BITS):
        self.profile = profile
        self.mode = mode
        self.draws = draws
        self.exact = shape_bits <= 0
        self.qn = quantizer(shape_bits)
        self.qc_bits = max(1, shape_bits - 2)
        self.qc = quantizer(self.qc_bits) if not self.exact else quantizer(0)
        self.grid_bits = max(1, shape_bits - 2)
        key = (id(profile), mode.name, shape_bits, draws.group_tokens, draws.price_key)
        hit = _CACHES.get(key)
        if hit is None or hit[0]() is not profile:
            hit = (weakref.ref(profile), {})
            _CACHES[key] = hit
        self.cache = hit[1]
        self.misses = 0

    def _group_key(self, ns: tuple, ss: tuple) -> tuple:
        """(seqs, mean context) per group, rounded; several non-empty groups share one pooled context."""
        qn, qc = self.qn, self.qc
        if len(ns) == 1:  # the common case, spelled out
            n = ns[0]
            return (qn(n), qc(int(ss[0] / n + 0.5))) if n else (0, 0)
        if self.exact or sum(1 for n in ns if n) <= 1:
            out = ()
            for n, s in zip(ns, ss):
                out += (n if self.exact else qn(n), qc(int(s / n + 0.5)) if n else 0)
            return out
        c = qc(int(sum(ss) / sum(ns) + 0.5))
        out = ()
        for n in ns:
            out += (qn(n), c if n else 0)
        return out

    def price(self, m: int, tp: int, psum: int, ns: tuple, ss: tuple) -> float:
        """m prefill chunks of tp tokens in all (context sum psum); ns[i] sequences of decode-phase
        group i with context sum ss[i]."""
        rest = self._group_key(ns, ss)
        cache = self.cache
        if not m:
            key = (0, 0, 0) + rest
            t = cache.get(key)
            if t is None:
                t = self._miss(key)
            return t
        x = tp // m
        pc = self.qc(int(psum / m + 0.5))
        b = self.grid_bits
        if self.exact or x < (1 << b):
            lo = hi = x
        else:
            sh = x.bit_length() - b
            lo = (x >> sh) << sh
            hi = lo if lo == x else lo + (1 << sh)
        key = (m, lo, pc) + rest
        t = cache.get(key)
        if t is None:
            t = self._miss(key)
        if hi == lo:
            return t
        key = (m, hi, pc) + rest
        t2 = cache.get(key)
        if t2 is None:
            t2 = self._miss(key)
        return t + (t2 - t) * (x - lo) / (hi - lo)

    def decode_price(self, n: int, ssum, c: int) -> tuple[float, int]:
        """Seconds of a step of n sequences of one decode-phase group, context sum ssum (mean
        rounded: c), no prefill - what price(0, 0, 0, (n,), (ssum,)) returns - and the mean
        context below which the price holds (it rises with the context)."""
        if self.exact:
            return self.price(0, 0, 0, (n,), (ssum,)), c + 1
        q = self.qc(c)
        b = max(1, self.qc_bits)
        if c < (1 << b):
            return self.price(0, 0, 0, (n,), (ssum,)), c + 1
        half = 1 << (c.bit_length() - b - 1)
        return self.price(0, 0, 0, (n,), (ssum,)), min(q + half, 1 << c.bit_length())

    def _miss(self, key) -> float:
        t = self.cache[key] = self._price(key)
        self.misses += 1
        return t

    def _price(self, key) -> float:
        m, tp, pctx = key[:3]
        mode = self.mode
        prefill = Segment(mode.prefill_kind, m, max(1, tp), pctx) if m else None
        groups = tuple(Segment(kind, key[3 + 2 * i], tokens, key[4 + 2 * i])
                       for i, (kind, tokens) in enumerate(zip(mode.group_kinds, self.draws.group_tokens)))
        return mode.step_ms(self.profile, prefill, groups, self.draws) / 1e3
