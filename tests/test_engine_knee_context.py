"""AR decode past the kernel knee (issue 49): vLLM 0.26 on an H200 runs a decode step of 17 sequences or more at a
time set by its sequences' context, not by their count or by the CUDA-graph size it is padded to. The engine-step
features price the decoding sequences' context past the knee apart (`past_knee_context_ktokens`); the committed
runs show why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costmodel.roofline import Segment
from costmodel.stepcost.linear import features
from measure.fit.steps import load_run, load_steps

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine" / "h200-fp8-ar" / "default"


class _Roof:  # the roofline terms features() reads; their values do not matter here
    roofline_ms = memory_ms = compute_ms = 1.0
    kv_read_bytes = kv_write_bytes = 0.0
    bytes = 1.0


def test_the_knee_prices_the_decoding_sequences_context():
    decode = (Segment("decode_step", 40, 1, 1500),)
    assert features(_Roof, decode, 512, 16)["past_knee_context_ktokens"] == pytest.approx(60.0)  # 40 x 1,500 tokens
    assert features(_Roof, (Segment("decode_step", 12, 1, 1500),), 512, 16)["past_knee_context_ktokens"] == 0.0  # below the knee
    mixed = (Segment("prefill", 1, 2048, 4096), *decode)
    assert features(_Roof, mixed, 512, 16)["past_knee_context_ktokens"] == pytest.approx(60.0)  # a prefill chunk's context: not decoding
    verify = (Segment("verify_step", 8, 5, 1000),)  # MTP: k + 1 = 5 query tokens a sequence still decode
    assert features(_Roof, verify, 512, 16)["past_knee_context_ktokens"] == pytest.approx(8.0)


@pytest.fixture(scope="module")
def decode_steps():
    steps = load_steps(load_run(RUN), "gap_ms", [])
    steps = steps[steps["prefill_reqs"] == 0]
    loads = {ld["name"]: ld for ld in json.loads((RUN / "loads.json").read_text())}
    return steps, loads


def _load(steps, ld):
    return steps[(steps["wall_time"] >= ld["start_s"]) & (steps["wall_time"] <= ld["start_s"] + ld["duration_s"])]


def test_past_the_knee_a_decode_step_costs_its_context_not_its_count(decode_steps):
    steps, loads = decode_steps
    short, long = _load(steps, loads["closed-c64-short"]), _load(steps, loads["closed-c64"])
    assert short["decode_reqs"].median() > long["decode_reqs"].median()  # more sequences ...
    assert (short["context_tokens"] / short["decode_reqs"]).median() < 0.5 * (long["context_tokens"] / long["decode_reqs"]).median()
    assert short["ms"].median() < 0.75 * long["ms"].median()  # ... of short context run faster (6.7 ms against 10.5)


def test_padding_to_the_capture_size_does_not_make_the_flat_decode_steps(decode_steps):
    """17-24 sequences run as a 24-token graph, 25-32 as a 32-token one: the same time (8.4-8.7 ms), near 1,600
    tokens' context each, 1.5x the 16-sequence step's."""
    steps, loads = decode_steps
    c32 = _load(steps, loads["closed-c32"])
    ms = {lo: c32[c32["decode_reqs"].between(lo, lo + 7)]["ms"].median() for lo in (17, 25)}
    assert ms[25] == pytest.approx(ms[17], rel=0.05), ms
    at16 = steps[steps["decode_reqs"] == 16]["ms"].median()
    assert min(ms.values()) > 1.3 * at16
