"""simulate/percentiles.py gives np.percentile's values to the bit, on samples of every size a point
summarises (one request to thousands), spreads over six orders of magnitude, ties and repeated values."""

import numpy as np
import pytest

from costmodel.schemas.results import PERCENTILES
from simulate.percentiles import linear_percentiles


def samples():
    rng = np.random.default_rng(0)
    for n in [*range(1, 40), 100, 1000, 12_345]:
        yield rng.lognormal(3, 1.5, n) * rng.choice([1e-3, 1, 1e3])
        yield np.round(rng.exponential(20, n))  # ties
    yield np.full(7, 2.5)


@pytest.mark.parametrize("percentiles", [PERCENTILES, (0, 100), (50,), (12.5, 33.3, 66.7)])
def test_the_same_values_as_numpy_to_the_bit(percentiles):
    for x in samples():
        assert np.array_equal(linear_percentiles(x, percentiles), np.percentile(x, percentiles)), (len(x), percentiles)


def test_the_docstring_example():
    assert np.array_equal(linear_percentiles(np.array([1.0, 2.0, 4.0]), (50, 90)), [2.0, 3.6])
