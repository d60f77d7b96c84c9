"""MTP's padded verify steps (issue 49): vLLM captures a drafting engine's full CUDA graphs at its capture sizes
rounded up to multiples of k + 1, and a uniform verify step of another size is padded and runs slower. The
committed H200 runs show it at every k; the engine-step features mark such a step (`graph_padded`), so a profile
fitted at one k prices another k's steps where its graphs are."""

from __future__ import annotations

from pathlib import Path

import pytest

from costmodel.roofline import Segment
from costmodel.stepcost.linear import captured_sizes, padded
from measure.fit.steps import load_run

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"


def test_capture_sizes_are_vllms_rounded_up_to_k_plus_one():
    assert sorted(captured_sizes(5, 512))[:8] == [5, 10, 20, 25, 35, 40, 50, 60]  # k = 4: 1, 2, 4 -> 5; 8 -> 10; 16 -> 20 ...
    assert sorted(captured_sizes(3, 512))[:6] == [3, 6, 9, 18, 24, 33]  # k = 2
    assert sorted(captured_sizes(1, 512))[:5] == [1, 2, 4, 8, 16] and max(captured_sizes(1, 512)) == 512


def test_a_uniform_verify_step_off_the_capture_sizes_is_padded():
    verify = lambda n, k: (Segment("verify_step", n, k + 1, 1024),)  # noqa: E731
    assert padded(verify(3, 4), 15, 512) == 1.0 and padded(verify(4, 4), 20, 512) == 0.0  # 15 tokens: padded to 20
    assert padded(verify(4, 2), 12, 512) == 1.0 and padded(verify(3, 2), 9, 512) == 0.0
    assert padded(verify(200, 4), 1000, 512) == 0.0  # past the largest graph: eager (graph_off), not padded
    assert padded((Segment("decode_step", 3, 1, 1024),), 3, 512) == 0.0  # AR: one token a sequence, padding is free
    mixed = (Segment("prefill", 1, 100, 0), *verify(3, 4))
    assert padded(mixed, 115, 512) == 0.0  # a prefill beside it: not a uniform step


@pytest.mark.parametrize("run, padded_n, captured_n", [("h200-fp8-mtp-matrix/k2-a0.6", 4, 3), ("h200-fp8-mtp-full2/k4-a0.8", 3, 4),
                                                       ("h200-fp8-mtp-matrix/k5-a0.9", 5, 4)])
def test_the_engine_ran_padded_steps_slower(run, padded_n, captured_n):
    """Median gap of verify-only steps: a padded size against the captured size beside it (one more or fewer sequence)."""
    st = load_run(ROOT / run).table("steps").query("prefill_reqs == 0")
    ms = {n: st[st["verify_reqs"] == n]["gap_ms"].median() for n in (padded_n, captured_n)}
    assert ms[padded_n] > 1.5 * ms[captured_n], ms


def test_the_simulator_prices_a_padded_verify_step_at_its_own_count():
    """The step pricer rounds counts of 32 sequences and more for its cache, but not where a padded verify step is
    priced apart: at k = 4, 33 sequences (165 tokens) are padded to 170, 34 (170 tokens) are captured."""
    import numpy as np

    from costmodel.modes import ModeDraws, get_mode
    from costmodel.shipped import default_profile
    from simulate.steptime import StepPricer

    draws = ModeDraws((5,), np.zeros(0, dtype=np.int64), price_key=(4,), side_passes=4)
    fast, exact = (StepPricer(default_profile("h200"), get_mode("mtp"), draws, *b) for b in ((), (0,)))
    for n in (33, 34, 35, 64, 101):
        assert fast.price(0, 0, 0, (n,), (n * 1000,)) == pytest.approx(exact.price(0, 0, 0, (n,), (n * 1000,)), rel=0.07)
    assert fast.price(0, 0, 0, (33,), (33 * 1024,)) > fast.price(0, 0, 0, (34,), (34 * 1024,))
