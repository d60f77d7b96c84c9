"""The step pricer's packed paths (simulate/steptime.py price_one, price_two, decode_at): the prices of price()'s
tuple-keyed path, found under one integer key; and a pricer that prices steps its own way (a subclass overriding
price(), as the vLLM replay's recorded durations do) still sees every full step."""

import itertools

import pytest

from costmodel.modes import get_mode
from costmodel.shipped import default_profile
from simulate.steptime import StepPricer, pack_code
from simulate.workload import Workload, build_requests


def _pricer(mode: str, shape_bits: int = 5) -> StepPricer:
    profile = default_profile("h200")
    serving = get_mode(mode)
    reqs = build_requests(profile, Workload(), 5.0, n_requests=50, seed=0)
    return StepPricer(profile, serving, serving.draw(profile, reqs, 0), shape_bits)


def test_pack_code_is_one_to_one_on_rounded_values():
    values = sorted(set(range(8)) | {m << s for m in range(1, 8) for s in range(40)})  # every value of at most 3 significant bits
    codes = [pack_code(v, 3) for v in values]
    assert len(set(codes)) == len(codes) and max(codes) < 1 << 9


@pytest.mark.parametrize("shape_bits", [5, 0])
def test_one_group_steps_cost_what_the_tuple_path_says(shape_bits):
    p, q = _pricer("ar", shape_bits), _pricer("ar", shape_bits)
    for m, tp, n, ctx in itertools.product((0, 1, 3), (7, 300, 4100), (0, 1, 17, 40, 63), (100, 1500, 9000)):
        tp = tp if m else 0
        if not (m or n):
            continue  # (a step of nothing is never priced)
        assert p.price_one(m, tp, m * 50, n, n * ctx) == q.price(m, tp, m * 50, (n,), (n * ctx,))


@pytest.mark.parametrize("shape_bits", [5, 0])
def test_two_group_steps_cost_what_the_tuple_path_says(shape_bits):
    p, q = _pricer("diffusion", shape_bits), _pricer("diffusion", shape_bits)
    for m, tp, n1, n2, c1, c2 in itertools.product((0, 2), (300, 2100), (0, 1, 5), (0, 2, 7), (800, 3000), (900, 5000)):
        tp = tp if m else 0
        if not (m or n1 or n2):
            continue
        assert p.price_two(m, tp, 0, n1, n2, n1 * c1, n2 * c2) == q.price(m, tp, 0, (n1, n2), (n1 * c1, n2 * c2))


def test_a_pricer_with_its_own_price_sees_the_full_steps():
    base = _pricer("ar")

    class Fixed(StepPricer):
        def price(self, m, tp, psum, ns, ss):
            return 0.5

    fixed = Fixed(base.profile, base.mode, base.draws)
    assert fixed.price_one(1, 100, 0, 3, 3000.0) == 0.5 and fixed.price_two(0, 0, 0, 1, 1, 900.0, 900.0) == 0.5


def test_the_packed_paths_serve_a_pricer_that_prices_as_steppricer_does():
    """Compiled or not, a StepPricer (and a subclass that keeps its price()) takes the packed keys: their caches fill;
    a subclass with its own price() does not."""
    ar = _pricer("ar")
    ar.price_one(1, 100, 0, 3, 3000.0)
    assert ar.own_price and ar.pcache

    class Kept(StepPricer):
        pass

    class Own(StepPricer):
        def price(self, m, tp, psum, ns, ss):
            return 0.5

    assert Kept(ar.profile, ar.mode, ar.draws).own_price
    assert not Own(ar.profile, ar.mode, ar.draws).own_price
