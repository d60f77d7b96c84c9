"""Engine-step durations from the profile's pass cost models (the only cost source).

One engine step is one forward pass over a mix of segments (prefill chunks beside decode tokens,
denoising canvases and commits), priced jointly by `Profile.pass_ms` (one weight read); MTP adds
k sequential draft passes of the assistant before its verify pass.

Speed: an hour of traffic has ~10^5 engine steps but a pass_ms miss costs ~100 us, so a step's
shape is reduced to a small integer key and the prices are cached. With resolution `shape_bits`
b (default 5):
- sequence counts are rounded to b significant bits (exact below 2**b = 32, within 1/2**b above);
- mean contexts to b-2 significant bits (within 1/2**(b-2) = 12.5%, rounded, so 6.25% at most;
  context is a second-order term of a pass's cost); in a diffusion step the denoising and
  committing canvases are priced at their pooled mean context (one population of requests);
- tokens per prefill chunk are placed on a grid of b-2 significant bits and the price is
  interpolated linearly between the two neighbouring grid points (first-order accurate in the
  dominant, near-linear dimension).
Against exact pricing this is within about 1% per step on the benchmark workloads (measured in
tests/test_simulate_pricing). `shape_bits=0` prices every shape exactly (no rounding, no pooling):
the tests that compare with hand computations use it.
"""

from __future__ import annotations

import weakref

from costmodel.schemas.profile import Profile
from costmodel.roofline import Segment

DEFAULT_SHAPE_BITS = 5
KINDS = {
    "diffusion": ("encoder_prefill", "denoise_step", "encoder_commit"),
    "ar": ("prefill", "decode_step", None),
    "mtp": ("prefill", "verify_step", "draft_step"),
}
# (id(profile), mode, bits) -> (weakref to the profile, {key: seconds}); shared by every run in a
# process, so plan's repeated run_point calls on one profile reuse the prices.
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
    """Seconds of one engine step, from (prefill chunks, decode-phase groups) counts and sums."""

    def __init__(self, profile: Profile, mode: str, shape_bits: int = DEFAULT_SHAPE_BITS, draft_tokens: int = 0,
                 canvas: int = 256):
        self.profile = profile
        self.mode = mode
        self.exact = shape_bits <= 0
        self.qn = quantizer(shape_bits)
        self.qc = quantizer(max(1, shape_bits - 2)) if not self.exact else quantizer(0)
        self.grid_bits = max(1, shape_bits - 2)
        self.k = draft_tokens
        self.canvas = canvas
        key = (id(profile), mode, shape_bits, draft_tokens, canvas)
        hit = _CACHES.get(key)
        if hit is None or hit[0]() is not profile:
            hit = (weakref.ref(profile), {})
            _CACHES[key] = hit
        self.cache = hit[1]
        self.misses = 0

    def price(self, m: int, tp: int, psum: int, n1: int, s1: float, n2: int = 0, s2: float = 0.0) -> float:
        """m prefill chunks of tp tokens in all (context sum psum); n1 sequences of the first
        decode-phase group (context sum s1); n2 of the second (diffusion: committing canvases)."""
        qn, qc = self.qn, self.qc
        if self.exact or not n2:
            rest = (n1 if self.exact else qn(n1), qc(int(s1 / n1 + 0.5)) if n1 else 0,
                    n2, qc(int(s2 / n2 + 0.5)) if n2 else 0)
        else:
            c = qc(int((s1 + s2) / (n1 + n2) + 0.5))
            rest = (qn(n1), c if n1 else 0, qn(n2), c)
        cache = self.cache
        if not m:
            key = (0, 0, 0) + rest
            t = cache.get(key)
            if t is None:
                t = self._miss(key)
            return t
        x = tp // m
        pc = qc(int(psum / m + 0.5))
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

    def _miss(self, key) -> float:
        t = self.cache[key] = self._price(key)
        self.misses += 1
        return t

    def _price(self, key) -> float:
        m, tp, pctx, n1, c1, n2, c2 = key
        pre, g1, g2 = KINDS[self.mode]
        segs = []
        if m:
            segs.append(Segment(pre, m, max(1, tp), pctx))
        if self.mode == "diffusion":
            if n1:
                segs.append(Segment(g1, n1, self.canvas, c1))
            if n2:
                segs.append(Segment(g2, n2, self.canvas, c2))
            return self.profile.pass_ms("diffusion", tuple(segs)) / 1e3
        if self.mode == "ar":
            if n1:
                segs.append(Segment(g1, n1, 1, c1))
            return self.profile.pass_ms("ar", tuple(segs)) / 1e3
        ms = 0.0
        if n1:
            segs.append(Segment(g1, n1, self.k + 1, c1))
            ms += self.k * self.profile.pass_ms("mtp", (Segment(g2, n1, 1, c1),))
        return (ms + self.profile.pass_ms("mtp", tuple(segs))) / 1e3
