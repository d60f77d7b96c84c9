"""The simulator's fast paths give what the plain ones give: a decode step's price under its integer key
and the range of mean contexts it holds for, the features of a pass by position, and MTP's tokens per
verify step drawn a chunk at a time."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.modes import ModeDraws, get_mode
from costmodel.roofline import Segment as S
from costmodel.seeding import rng_for
from costmodel.stepcost import pass_cost
from costmodel.stepcost.linear import FEATURES, feature_values, features
from simulate.steptime import StepPricer, bit_length

PROFILE = roofline_profile("h200", "bf16", 0.33)
AR = ModeDraws((1,), np.zeros(0, dtype=np.int64))


def test_bit_length_is_ints():
    assert [bit_length(x) for x in (0, 1, 2, 255, 256, 4095, 1 << 40)] == [x.bit_length() for x in (0, 1, 2, 255, 256, 4095, 1 << 40)]


@pytest.mark.parametrize("bits", [5, 0])
def test_a_decode_price_holds_over_the_contexts_it_names(bits):
    pricer = StepPricer(PROFILE, get_mode("ar"), AR, bits)
    for n in (1, 7, 33, 200):
        for c in (100, 513, 1000, 4097, 30000):
            t = pricer.decode_at(n, n * c, c)
            lo, hi = pricer.d_lo, pricer.d_hi
            assert lo <= c < hi
            assert t == pricer.price(0, 0, 0, (n,), (n * c,))  # the same price as the tuple-keyed path
            assert pricer.decode_price(n, n * c, c) == (t, hi)
            for c2 in (lo, hi - 1):  # every mean context in [lo, hi) prices the same
                assert pricer.price(0, 0, 0, (n,), (n * c2,)) == t


def test_features_by_position_are_the_named_features():
    roof = pass_cost(PROFILE, "ar").roofline
    for segs in [(S("decode_step", 40, 1, 1500),), (S("prefill", 2, 300, 10), S("decode_step", 12, 1, 900))]:
        r = roof.pass_cost(segs)
        assert dict(zip(FEATURES, feature_values(r, segs, 512, 16))) == features(r, segs, 512, 16)


def test_mtp_draws_a_chunk_at_a_time_are_one_draw():
    from costmodel.modes.mtp import STREAM_MTP, MtpDraws

    draws = MtpDraws.__new__(MtpDraws)
    draws.k, draws.cdf = 4, np.cumsum([0.3, 0.25, 0.2, 0.15, 0.1])
    n = 200_003
    one = np.concatenate([[0], np.cumsum(draws._draw(rng_for(7, STREAM_MTP), n), dtype=np.int64)])
    assert np.array_equal(draws._csum(rng_for(7, STREAM_MTP), n, chunk=4096), one)
