"""Step pricing: exact mode is the profile's pass_ms of the step's mix; the default resolution stays
within a stated error of it; the cache is per profile object."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.roofline import Segment as S
from costmodel.modes import ModeDraws, get_mode
from simulate.steptime import StepPricer as _StepPricer, quantizer

PROFILE = roofline_profile("h200", "bf16", 0.33)
EMPTY = np.zeros(0, dtype=np.int64)
# the shapes a run's draws fix: canvas 256 for diffusion, one token for AR, k = 4 for MTP
SHAPES = {"diffusion": ModeDraws((256, 256), EMPTY, price_key=(256,)), "ar": ModeDraws((1,), EMPTY),
          "mtp": ModeDraws((5,), EMPTY, price_key=(4,), side_passes=4)}


def StepPricer(profile, mode, *bits):
    return _StepPricer(profile, get_mode(mode), SHAPES[mode], *bits)


def test_quantizer():
    q = quantizer(5)
    assert [q(x) for x in (0, 1, 31)] == [0, 1, 31]
    for x in range(32, 20000, 7):
        assert abs(q(x) - x) <= x / 32
    assert quantizer(0)(12345) == 12345


def test_exact_prices_are_pass_ms_of_the_mix():
    d = StepPricer(PROFILE, "diffusion", 0)
    assert d.price(2, 1000, 100, (3, 1), (3 * 700, 900)) == pytest.approx(PROFILE.pass_ms("diffusion", (
        S("encoder_prefill", 2, 500, 50), S("denoise_step", 3, 256, 700), S("encoder_commit", 1, 256, 900))) / 1e3)
    a = StepPricer(PROFILE, "ar", 0)
    assert a.price(0, 0, 0, (40,), (40 * 512,)) == pytest.approx(PROFILE.pass_ms("ar", (S("decode_step", 40, 1, 512),)) / 1e3)
    m = StepPricer(PROFILE, "mtp", 0)
    # vLLM's speculator: one draft pass over the 8 x 5 verified and the 64 prefill tokens, then 3 one-token passes over 9 sequences
    want = (PROFILE.pass_ms("mtp", (S("draft_step", 8, 5, 300), S("draft_step", 1, 64, 0))) + 3 * PROFILE.pass_ms("mtp", (S("draft_step", 9, 1, 300),))
            + PROFILE.pass_ms("mtp", (S("prefill", 1, 64, 0), S("verify_step", 8, 5, 300))))
    assert m.price(1, 64, 0, (8,), (8 * 300,)) == pytest.approx(want / 1e3)


@pytest.mark.parametrize("mode", ["diffusion", "ar", "mtp"])
def test_default_resolution_is_close_to_exact(mode):
    rng = np.random.default_rng(0)
    exact = StepPricer(PROFILE, mode, 0)
    approx = StepPricer(PROFILE, mode)
    errs = []
    for _ in range(300):
        m = int(rng.integers(0, 3))
        tp = int(rng.integers(m, 4000 * m + 1)) if m else 0
        n1 = int(rng.integers(0 if m else 1, 64))
        n2 = int(rng.integers(0, 8)) if mode == "diffusion" else 0
        ctx = float(rng.integers(16, 3000))
        ns, ss = (n1, n2), (n1 * ctx, n2 * ctx * rng.uniform(0.8, 1.2))
        k = len(get_mode(mode).group_kinds)
        args = (m, tp, int(rng.integers(0, 800)) * m, ns[:k], ss[:k])
        errs.append(approx.price(*args) / exact.price(*args) - 1)
    errs = np.abs(errs)
    assert errs.mean() < 0.01 and errs.max() < 0.05, (errs.mean(), errs.max())


def test_price_cache_is_shared_per_profile_object():
    other = roofline_profile("h200", "bf16", 0.5)
    a, b, c = StepPricer(PROFILE, "ar"), StepPricer(PROFILE, "ar"), StepPricer(other, "ar")
    assert a.cache is b.cache and a.cache is not c.cache
    assert c.price(0, 0, 0, (10,), (5000,)) < a.price(0, 0, 0, (10,), (5000,))  # a faster engine
