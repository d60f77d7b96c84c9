"""Engine-step durations from the profile's pass cost models (the only cost source).

One engine step is prefill chunks beside any number of decode-phase groups (a mode's
`group_kinds`: AR decode tokens; diffusion denoising canvases and commits; MTP verify tokens),
priced by costmodel/stepcost's `ModeCost.step_ms`: the mode's `step_ms` (costmodel/modes; by
default one forward pass, one weight read; MTP adds k sequential draft passes of the assistant)
plus every registered step term.

Speed: an hour of traffic has ~10^5 engine steps but a step-price miss costs ~100 us, so a step's
shape is reduced to a small integer key and the prices are cached. With resolution `shape_bits`
b (default 5):
- sequence counts are rounded to b significant bits (exact below 2**b = 32, within 1/2**b above;
  exact wherever the step fits the largest CUDA graph in a profile that prices padded verify steps,
  exact_seqs_below: a drafting engine's 33 sequences are padded, its 34 are not);
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

from costmodel.modes import ModeDraws, ServingMode
from costmodel.roofline import Segment
from costmodel.schemas.profile import Profile
from costmodel.stepcost import resolve

DEFAULT_SHAPE_BITS = 5


def bit_length(x: int) -> int:
    """x.bit_length() for x >= 0 by shifts: compiled, plain C arithmetic instead of a Python method call."""
    n = 0
    while x >= 256:
        x >>= 8
        n += 8
    while x:
        x >>= 1
        n += 1
    return n


def pack_code(x: int, bits: int) -> int:
    """x >= 0 of at most `bits` significant bits (a rounded shape value, or one below 2**bits) as a small integer,
    one to one: x itself below 2**bits, else its bit length and its `bits` leading bits; below 2**(6 + bits)."""
    if x < 1 << bits:
        return x
    bl = bit_length(x)
    return (bl << bits) | (x >> (bl - bits))


def round_bits(v: int, lim: int, bits: int) -> int:
    """v at and above lim rounded (half up) to its `bits` leading bits, below lim as it is: the shape grid on which
    step prices are cached (sequence counts, mean contexts); compiled, a C call from the pricers' paths."""
    if v < lim:
        return v
    sh = bit_length(v) - bits
    return ((v + (1 << (sh - 1))) >> sh) << sh


def grid_below(x: int, b: int) -> int:
    """The grid point of prefill-chunk sizes at or below x: x below 2**b, else x cut to its b leading bits."""
    if x < (1 << b):
        return x
    sh = bit_length(x) - b
    return (x >> sh) << sh


def grid_above(x: int, lo: int, b: int) -> int:
    """The grid point after lo = grid_below(x, b), or lo where x lies on the grid (prices interpolate between the two)."""
    return lo if lo == x else lo + (1 << (bit_length(x) - b))


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


def exact_seqs_below(cost, group_tokens: tuple) -> int:
    """The sequence count below which a step's count is kept exact: a drafting engine's uniform verify step is
    priced by whether its tokens (seqs x (k + 1)) are one of its captured CUDA-graph sizes (costmodel/stepcost/
    linear.py graph_padded), which rounding 33 sequences to 34 would change; so, where the profile prices padded
    steps, every count whose step fits the largest graph is kept (0: none)."""
    graph_max = int(getattr(cost, "graph_max_tokens", 0) or 0)
    models = getattr(cost, "pass_models", None) or {}
    if not graph_max or not any((pm.coef or {}).get("graph_padded") for pm in models.values()):
        return 0
    return max((graph_max // q + 1 for q in group_tokens if q > 1), default=0)


def inherits(cls, name: str, base) -> bool:
    """Whether `cls` takes attribute `name` from `base` (no class between them defines its own). Not an identity
    test of the two attributes: compiled, `type(self).price is StepPricer.price` is false even for a StepPricer."""
    for c in cls.__mro__:
        if c is base:
            return True
        if name in vars(c):
            return False
    return False


class StepPricer:
    """Seconds of one engine step, from the prefill chunks' counts and the decode-phase groups'
    sequence counts and context sums.

    Cache keys by step kind (the tuple lengths differ, so they share one dict): a decode-only step
    of one group is (seqs, context); of two groups (seqs, context, seqs, context); a step with
    prefill chunks (chunks, tokens per chunk, prefill context) + the group part. The rounding is
    done inline (the quantizer's arithmetic): this is the simulator's hottest call."""

    def __init__(self, profile: Profile, mode: ServingMode, draws: ModeDraws, shape_bits: int = DEFAULT_SHAPE_BITS):
        self.profile = profile
        self.mode = mode
        self.draws = draws
        self.exact = shape_bits <= 0
        self.qn = quantizer(shape_bits)
        self.qc_bits = max(1, shape_bits - 2)
        self.qc = quantizer(self.qc_bits) if not self.exact else quantizer(0)
        self.grid_bits = max(1, shape_bits - 2)
        # inline rounding: values below the limits are kept (an exact pricer's limits are infinite)
        self.n_bits, self.c_bits = shape_bits, self.qc_bits
        self.n_lim = 1 << shape_bits if not self.exact else 1 << 62
        self.c_lim = 1 << self.qc_bits if not self.exact else 1 << 62
        resolved = resolve(profile)
        self.cost = resolved.cost(mode.name)
        if not self.exact and (n := exact_seqs_below(self.cost, draws.group_tokens)) > self.n_lim:
            self.n_lim, qn = n, self.qn
            self.qn = lambda x: x if x < n else qn(x)
        # step prices shared by every run on this profile object (plan's repeated points reuse them)
        key = (mode.name, shape_bits, draws.group_tokens, draws.price_key)
        self.cache = resolved.step_cache(key)
        self.dcache = resolved.step_cache(key + ("packed decode",))  # decode_at's prices, under integer keys
        self.d_lo = self.d_hi = 0
        self.misses = 0
        # price_one's prices under one integer key (m, n and the rounded values' pack_code), where they fit 62 bits
        self.wc, self.wg = 6 + self.c_bits, 6 + self.grid_bits
        self.packed = not self.exact and 8 + 12 + 2 * self.wc + self.wg <= 62
        self.pcache = resolved.step_cache(key + ("packed one group",))
        # a subclass that prices steps its own way (simulate/validate/vllm/replay.py RecordedStepPricer: the engine's recorded
        # durations) gets price_one's and price_two's steps through its price()
        self.own_price = inherits(type(self), "price", StepPricer)
        self.packed2 = not self.exact and 8 + 24 + 2 * self.wc + self.wg <= 62
        self.pcache2 = resolved.step_cache(key + ("packed two groups",))  # price_two's
        self.drows = resolved.step_cache(key + ("decode rows",)).setdefault("rows", [])  # decode_at's prices: [seqs][pack_code(context)]
        self.segments: dict = {}  # (kind, seqs, tokens, context) -> its Segment (_segment)

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

    def _one_group(self, n: int, ssum) -> tuple:
        """_group_key((n,), (ssum,)) with the rounding inline."""
        if not n:
            return (0, 0)
        c = int(ssum / n + 0.5)
        n = round_bits(n, self.n_lim, self.n_bits)
        c = round_bits(c, self.c_lim, self.c_bits)
        return (n, c)

    def _two_groups(self, ns: tuple, ss: tuple) -> tuple:
        """_group_key of two groups (diffusion's denoising and committing canvases), rounding inline."""
        n1, n2 = ns
        if self.exact or not (n1 and n2):
            return self._one_group(n1, ss[0]) + self._one_group(n2, ss[1]) if not self.exact else self._group_key(ns, ss)
        c = int((ss[0] + ss[1]) / (n1 + n2) + 0.5)
        c = round_bits(c, self.c_lim, self.c_bits)
        n1, n2 = round_bits(n1, self.n_lim, self.n_bits), round_bits(n2, self.n_lim, self.n_bits)
        return (n1, c, n2, c)

    def price(self, m: int, tp: int, psum: int, ns: tuple, ss: tuple) -> float:
        """m prefill chunks of tp tokens in all (context sum psum); ns[i] sequences of decode-phase
        group i with context sum ss[i]."""
        k = len(ns)
        rest = self._one_group(ns[0], ss[0]) if k == 1 else (self._two_groups(ns, ss) if k == 2 else self._group_key(ns, ss))
        cache = self.cache
        if not m:
            t = cache.get(rest)
            if t is None:
                t = self._miss(rest, (0, 0, 0) + rest)
            return t
        x = tp // m
        pc = round_bits(int(psum / m + 0.5), self.c_lim, self.c_bits)  # the quantizer qc
        b = self.grid_bits
        lo = x if self.exact else grid_below(x, b)
        hi = x if self.exact else grid_above(x, lo, b)
        key = (m, lo, pc) + rest
        t = cache.get(key)
        if t is None:
            t = self._miss(key, key)
        if hi == lo:
            return t
        key = (m, hi, pc) + rest
        t2 = cache.get(key)
        if t2 is None:
            t2 = self._miss(key, key)
        return t + (t2 - t) * (x - lo) / (hi - lo)

    def price_one(self, m: int, tp: int, psum: int, n: int, ssum) -> float:
        """price(m, tp, psum, (n,), (ssum,)) of a mode with one decode-phase group (AR, MTP), the same prices,
        found under one integer key (pcache) instead of a tuple made per call: their full steps call this."""
        if not (self.packed and self.own_price) or m >= 256:
            return self.price(m, tp, psum, (n,), (ssum,))
        c = round_bits(int(ssum / n + 0.5), self.c_lim, self.c_bits) if n else 0  # _one_group
        r = round_bits(n, self.n_lim, self.n_bits)
        if r >= 4096:  # (past the packed field)
            return self.price(m, tp, psum, (n,), (ssum,))
        base = ((r << self.wc) | pack_code(c, self.c_bits)) << (self.wc + self.wg)
        return self._on_grid(self.pcache, base, 2 * self.wc + self.wg + 12, m, tp, psum, (r, c))

    def price_two(self, m: int, tp: int, psum: int, n1: int, n2: int, s1, s2) -> float:
        """price(m, tp, psum, (n1, n2), (s1, s2)) of a mode with two decode-phase groups (diffusion's denoising and
        committing canvases), the same prices, found under one integer key (pcache2) instead of a tuple made per call."""
        if not (self.packed2 and self.own_price) or m >= 256:
            return self.price(m, tp, psum, (n1, n2), (s1, s2))
        cl, cb = self.c_lim, self.c_bits
        if n1 and n2:  # _two_groups: one pooled context
            c = c1 = c2 = round_bits(int((s1 + s2) / (n1 + n2) + 0.5), cl, cb)
        else:  # _one_group of each
            c1 = round_bits(int(s1 / n1 + 0.5), cl, cb) if n1 else 0
            c2 = round_bits(int(s2 / n2 + 0.5), cl, cb) if n2 else 0
            c = c1 if n1 else c2
        r1, r2 = round_bits(n1, self.n_lim, self.n_bits), round_bits(n2, self.n_lim, self.n_bits)
        if r1 >= 4096 or r2 >= 4096:  # (past the packed fields)
            return self.price(m, tp, psum, (n1, n2), (s1, s2))
        base = ((((r1 << 12) | r2) << self.wc) | pack_code(c, cb)) << (self.wc + self.wg)
        return self._on_grid(self.pcache2, base, 2 * self.wc + self.wg + 24, m, tp, psum, (r1, c1, r2, c2))

    def _on_grid(self, packed: dict, base: int, m_shift: int, m: int, tp: int, psum: int, rest: tuple) -> float:
        """price's step of m chunks of tp tokens (context sum psum) beside the rounded decode groups `rest`, each
        grid point found in `packed` under one integer: base (the groups' fields, above the chunks' rounded context
        and the grid point) with m at m_shift (m 0: none of them, apart from every key with prefill)."""
        if not m:
            t = packed.get(base)
            if t is None:
                t = packed[base] = self._cached(rest, (0, 0, 0) + rest)
            return t
        x = tp // m
        pc = round_bits(int(psum / m + 0.5), self.c_lim, self.c_bits)
        b = self.grid_bits
        lo = grid_below(x, b)
        hi = grid_above(x, lo, b)
        head = (m << m_shift) | (pack_code(pc, self.c_bits) << self.wg)
        pk = base | head | pack_code(lo, b)
        t = packed.get(pk)
        if t is None:
            t = packed[pk] = self._cached((m, lo, pc) + rest, None)
        if hi == lo:
            return t
        pk = base | head | pack_code(hi, b)
        t2 = packed.get(pk)
        if t2 is None:
            t2 = packed[pk] = self._cached((m, hi, pc) + rest, None)
        return t + (t2 - t) * (x - lo) / (hi - lo)

    def _cached(self, key: tuple, full) -> float:
        """The price under `key` in the step cache, priced (as `full`, or the key itself) when missing."""
        t = self.cache.get(key)
        if t is None:
            t = self._miss(key, key if full is None else full)
        return t

    def price_part(self, ns: tuple, ss: tuple, g: int, tokens: int, ctx) -> float:
        """Seconds of a step without prefill chunks that runs, beside ns[i] sequences of group i
        (context sums ss[i]), one sequence of group g cut to `tokens` query tokens at context ctx:
        a diffusion canvas given the budget left (simulate/engines/diffusion.py). Its own segment
        of the pass; cached under a key no other step kind has (a leading 'part')."""
        k = len(ns)
        rest = self._one_group(ns[0], ss[0]) if k == 1 else (self._two_groups(ns, ss) if k == 2 else self._group_key(ns, ss))
        key = ("part", g, tokens, self.qc(int(ctx))) + rest
        t = self.cache.get(key)
        if t is None:
            t = self.cache[key] = self._price((0, 0, 0) + rest + key[1:4])
            self.misses += 1
        return t

    def decode_price(self, n: int, ssum, c: int) -> tuple[float, int]:
        """Seconds of a step of n sequences of one decode-phase group, context sum ssum (mean
        rounded: c), no prefill - what price(0, 0, 0, (n,), (ssum,)) returns - and the mean
        context below which the price holds (it rises with the context)."""
        t = self.decode_at(n, ssum, c)
        return t, self.d_hi

    def decode_at(self, n: int, ssum, c: int) -> float:
        """decode_price's seconds, leaving the mean contexts the price holds for in [d_lo, d_hi): the
        engines' coasts call this (compiled: no tuple made; the price found under one integer key)."""
        if not n:
            self.d_lo, self.d_hi = c, c + 1
            return self.price(0, 0, 0, (0,), (ssum,))
        n = round_bits(n, self.n_lim, self.n_bits)
        q = c
        if c < self.c_lim:  # exact pricing, or a context kept as it is
            self.d_lo, self.d_hi = c, c + 1
        else:
            bl = bit_length(c)
            sh = bl - self.c_bits
            half = 1 << (sh - 1)
            q = ((c + half) >> sh) << sh
            lo, hi = q - half, q + half
            self.d_lo = lo if lo > 1 << (bl - 1) else 1 << (bl - 1)
            self.d_hi = hi if hi < 1 << bl else 1 << bl
        if self.packed and n < 4096:  # the price in a list per sequence count, at the context's pack_code: no key made
            rows = self.drows
            if n >= len(rows):
                rows.extend([None] * (n + 1 - len(rows)))
            row = rows[n]
            if row is None:
                row = rows[n] = [None] * (1 << self.wc)
            k = pack_code(q, self.c_bits)
            t = row[k]
            if t is None:
                t = row[k] = self._cached((n, q), (0, 0, 0, n, q))
            return t
        if q >= 1 << 32:
            return self.price(0, 0, 0, (n,), (ssum,))
        key = (n << 32) + q  # (seqs, mean context) as one integer
        t = self.dcache.get(key)
        if t is None:
            rest = (n, q)
            t = self.cache.get(rest)
            if t is None:
                t = self._miss(rest, (0, 0, 0) + rest)
            self.dcache[key] = t
        return t

    def _miss(self, key: tuple, full: tuple) -> float:
        """Price the step of `full` (chunks, tokens per chunk, prefill context, then seqs and context
        per group) and cache it under `key`."""
        t = self.cache[key] = self._price(full)
        self.misses += 1
        return t

    def _price(self, key) -> float:
        """key: (chunks, tokens per chunk, prefill context), then seqs and context per group, then
        optionally (group, tokens, context) of one partial sequence (price_part)."""
        m, tp, pctx = key[:3]
        mode = self.mode
        prefill = self._segment(mode.prefill_kind, m, max(1, tp), pctx) if m else None
        gt = self.draws.group_tokens
        kinds = mode.group_kinds
        groups = tuple([self._segment(kinds[i], key[3 + 2 * i], gt[i], key[4 + 2 * i]) for i in range(min(len(kinds), len(gt)))])
        j = 3 + 2 * len(gt)
        if len(key) > j:
            groups += (self._segment(kinds[key[j]], 1, key[j + 1], key[j + 2]),)
        return self.cost.step_ms(prefill, groups, self.draws) / 1e3

    def _segment(self, kind: str, seqs: int, tokens: int, context: int) -> Segment:
        """The Segment of this shape, made once per pricer: the shapes of the steps it misses recur (a prefill chunk beside
        many decode batches), and one object per shape is hashed and compared faster by the price caches below."""
        k = (kind, seqs, tokens, context)
        seg = self.segments.get(k)
        if seg is None:
            seg = self.segments[k] = Segment(kind, seqs, tokens, context)
        return seg
