"""Workloads: arrival processes, length distributions, regime mix, trace replay, per-mode draws,
and one-line errors for bad files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel.baseline_profile import roofline_profile
from costmodel.errors import UserError
from simulate.api import run_point
from costmodel.modes.diffusion import DiffusionDraws as DiffusionPlan, canvas_content_distribution
from costmodel.modes.mtp import MtpDraws as MtpPlan, mtp_tokens_pmf
from simulate.request import Request
from simulate.workload import build_requests, load_workload, parse_workload

PROFILE = roofline_profile("h200", "bf16", 0.33)


def test_default_workload_lengths_follow_the_profile():
    reqs = build_requests(PROFILE, None, 5.0, n_requests=6000, seed=0)
    assert len(reqs) == 6000 and reqs.window_s == pytest.approx(reqs.arrival_s[-1])
    assert set(reqs.regimes) == set(PROFILE.commit_stats)
    for i, r in enumerate(reqs.regimes):
        sel = reqs.regime_idx == i
        assert 0.13 < sel.mean() < 0.2  # uniform over six regimes
        assert reqs.output_tokens[sel].mean() == pytest.approx(PROFILE.commit_stats[r].content_length.mean, rel=0.06)
    gaps = np.diff(reqs.arrival_s)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05) and gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.08)


def test_arrival_processes_and_qps_only_stretches_time():
    const = build_requests(PROFILE, parse_workload({"arrival": "constant"}), 4.0, n_requests=10, seed=0)
    assert np.allclose(np.diff(const.arrival_s), 0.25)
    bursty = build_requests(PROFILE, parse_workload({"arrival": {"process": "gamma", "cv": 3}}), 4.0, n_requests=20000, seed=0)
    g = np.diff(bursty.arrival_s)
    assert g.mean() == pytest.approx(0.25, rel=0.1) and g.std() / g.mean() == pytest.approx(3.0, rel=0.1)
    a = build_requests(PROFILE, None, 2.0, n_requests=50, seed=3)
    b = build_requests(PROFILE, None, 4.0, n_requests=50, seed=3)
    assert np.allclose(a.arrival_s, 2 * b.arrival_s) and (a.output_tokens == b.output_tokens).all()
    d = build_requests(PROFILE, None, 2.0, duration_s=100, seed=3)
    assert d.window_s == 100 and d.arrival_s.max() <= 100 and 150 < len(d) < 250


def test_length_distributions_and_regime_mix():
    wl = parse_workload({
        "prompt_tokens": {"dist": "uniform", "min": 100, "max": 200},
        "output_tokens": {"dist": "empirical", "values": [10, 700], "probs": [0.5, 0.5]},
        "regime_mix": {"R1": 3, "R4": 1},
    })
    reqs = build_requests(PROFILE, wl, 1.0, n_requests=4000, seed=1)
    assert reqs.prompt_tokens.min() >= 100 and reqs.prompt_tokens.max() <= 200
    assert set(np.unique(reqs.output_tokens)) == {10, 700}
    assert reqs.regimes == ("R1", "R4") and (reqs.regime_idx == 0).mean() == pytest.approx(0.75, abs=0.03)
    ln = parse_workload({"prompt_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.5, "min": 50, "max": 900}})
    p = build_requests(PROFILE, ln, 1.0, n_requests=4000, seed=1).prompt_tokens
    assert np.median(p) == pytest.approx(300, rel=0.05) and p.min() >= 50 and p.max() <= 900


def test_trace_replay_recorded_and_rescaled(tmp_path):
    rows = [(100.0, 50, 20, "R4"), (100.5, 400, 300, "R1"), (102.0, 30, 5, "R6"), (101.0, 80, 80, "R5")]
    unsorted = tmp_path / "unsorted.csv"  # never sorted silently: refused naming the row out of order
    unsorted.write_text("arrival_s,prompt_tokens,output_tokens,regime\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    (tmp_path / "uns.json").write_text(json.dumps({"trace": "unsorted.csv"}))
    with pytest.raises(UserError, match=r"row 4 \(arrival_s 101\) is before row 3 \(102\): the trace is not sorted by arrival"):
        run_point(PROFILE, "ar", None, workload=str(tmp_path / "uns.json"))
    rows = sorted(rows)
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens,regime\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    (tmp_path / "rec.json").write_text(json.dumps({"trace": "t.csv", "trace_time_scale": "recorded"}))
    res = run_point(PROFILE, "ar", None, workload=str(tmp_path / "rec.json"))
    df = res.requests
    assert df.arrival_s.tolist() == [0.0, 0.5, 1.0, 2.0]
    assert df.prompt_tokens.tolist() == [50, 400, 80, 30] and df.output_tokens.tolist() == [20, 300, 80, 5]
    assert df.regime.tolist() == ["R4", "R1", "R5", "R6"] and df.finished.all()
    assert res.summary.qps == pytest.approx(1.5)  # 3 gaps over 2 s
    with pytest.raises(UserError, match="recorded rate"):
        run_point(PROFILE, "ar", 2.0, workload=str(tmp_path / "rec.json"))
    # rescaled to 6 QPS and repeated to 10 requests; JSONL with a timestamp column and no regime
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps({"timestamp_s": r[0], "prompt_tokens": r[1], "output_tokens": r[2]}) for r in rows) + "\n")
    (tmp_path / "scaled.json").write_text(json.dumps({"trace": str(jl)}))
    df = run_point(PROFILE, "diffusion", 6.0, workload=str(tmp_path / "scaled.json"), n_requests=10).requests
    assert len(df) == 10 and np.allclose(df.arrival_s[:4], [0, 0.125, 0.25, 0.5])  # recorded 1.5 QPS x 4
    assert df.prompt_tokens.tolist()[:8] == [50, 400, 80, 30] * 2
    assert df.arrival_s.is_monotonic_increasing and df.finished.all()


@pytest.mark.parametrize("body,match", [
    ("[1, 2]", "not a JSON object"),
    ('{"arival": "poisson"}', "unknown field"),
    ('{"arrival": "bursty"}', "arrival 'bursty' is unknown"),
    ('{"arrival": "gamma"}', "need a cv"),
    ('{"arrival": {"process": "gamma"}}', "need \\\"cv\\\""),
    ('{"arrival": {"process": "gamma", "cv": -1}}', "arrival.cv -1 .* is below its bound"),
    ('{"arrival": {"process": "gamma", "cv": 1e300}}', "arrival.cv 1e\\+300 .* is above its bound"),
    ('{"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 1e300}}', "prompt_tokens.sigma 1e\\+300 is above its bound of 10"),
    ('{"output_tokens": {"dist": "uniform", "min": 10.5, "max": 12.5}}', "output_tokens.min 10.5 is not a whole number of tokens"),
    ('{"prompt_tokens": 100.5}', "prompt_tokens 100.5 is not a whole number .* would be rounded"),
    ('{"sessions": {"turns": 3, "think_s": 1e300}}', "sessions.think_s 1e\\+300 s is above its bound of 86,400"),
    ('{"prompt_tokens": {"dist": "zipf"}}', "dist 'zipf' is unknown"),
    ('{"prompt_tokens": {"dist": "lognormal", "median": 100}}', "needs \\\"sigma\\\""),
    ('{"prompt_tokens": {"dist": "uniform", "min": 9, "max": 3}}', "exceeds max"),
    ('{"output_tokens": {"dist": "empirical", "values": [1, 2], "probs": [0.5, 0.2]}}', "sum to 0.7"),
    ('{"output_tokens": 0}', "output_tokens 0 tokens is below its bound of 1"),
    ('{"output_tokens": "lots"}', "must be a number or an object"),
    ('{"regime_mix": {"R9": 1}}', "lacks"),
    ('{"regime_mix": {"R1": 0}}', "sum to 0"),
    ('{"trace": "missing.csv"}', "does not exist"),
    ('{"trace_time_scale": "recorded"}', "no trace"),
    ("{not json", "not valid JSON"),
])
def test_bad_workloads_are_one_line_errors(tmp_path, body, match):
    p = tmp_path / "w.json"
    p.write_text(body)
    with pytest.raises(UserError, match=match) as e:
        wl = load_workload(p)
        build_requests(PROFILE, wl, 1.0, n_requests=5, seed=0)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,match", [
    ("prompt_tokens\n5\n", "lacks column"),
    ("arrival_s,prompt_tokens\n0,5\n1,-3\n", "row 2 has prompt_tokens"),
    ("arrival_s,prompt_tokens\nx,5\n", "not a number of seconds"),
    ("arrival_s,prompt_tokens,regime\n0,5,R77\n", "regime"),
])
def test_bad_traces(tmp_path, text, match):
    (tmp_path / "t.csv").write_text(text)
    (tmp_path / "w.json").write_text(json.dumps({"trace": "t.csv"}))
    with pytest.raises(UserError, match=match):
        build_requests(PROFILE, load_workload(tmp_path / "w.json"), 1.0, seed=0)


def test_bad_run_lengths_and_rates():
    for kw, match in [(dict(qps=0.0), "must be a positive"), (dict(qps=-2.0), "must be a positive"), (dict(qps=float("nan")), "must be a positive"),
                      (dict(qps=1.0, n_requests=10, duration_s=5.0), "not both"), (dict(qps=1.0, n_requests=0), ">= 1"),
                      (dict(qps=1.0, duration_s=-1.0), "positive"), (dict(qps=0.001, duration_s=1.0), "no request arrives")]:
        q = kw.pop("qps")
        with pytest.raises(UserError, match=match):
            build_requests(PROFILE, None, q, seed=0, **kw)


# ---- per-mode draws -------------------------------------------------------------------------------

def test_diffusion_steps_follow_the_regime_distribution():
    reqs = build_requests(PROFILE, None, 1.0, n_requests=30000, seed=0)
    plan = DiffusionPlan(PROFILE, reqs, seed=0)
    k = np.asarray(plan.k)  # one canvas per request under the prior (content <= 256)
    assert len(k) == len(reqs)
    for i, r in enumerate(reqs.regimes):
        sel = reqs.regime_idx == i
        dist = PROFILE.commit_stats[r].steps_per_canvas
        for v, p in zip(dist.values, dist.probs):
            assert (k[sel] == v).mean() == pytest.approx(p, abs=0.02), (r, v)
    # longer content, more steps (comonotone coupling)
    assert np.corrcoef(reqs.output_tokens, k)[0, 1] > 0.5


def test_multi_canvas_requests_and_canvas_content():
    vals, probs = canvas_content_distribution(PROFILE.commit_stats["R1"].content_length, 256)
    assert vals.max() <= 256 and probs.sum() == pytest.approx(1.0)
    from costmodel.schemas.profile import Distribution

    v2, p2 = canvas_content_distribution(Distribution([600.0], [1.0]), 256)
    assert v2.tolist() == [88, 256] and p2.tolist() == pytest.approx([1 / 3, 2 / 3])
    wl = parse_workload({"output_tokens": 700})
    reqs = build_requests(PROFILE, wl, 1.0, n_requests=50, seed=0)
    plan = DiffusionPlan(PROFILE, reqs, seed=0)
    assert plan.blocks_list == [3] * 50 and len(plan.k) == 150


def test_mtp_draws_match_sample_accepted():
    acc = PROFILE.mtp_acceptance
    pmf = mtp_tokens_pmf(acc.per_position, acc.num_speculative_tokens)
    assert pmf.sum() == pytest.approx(1.0)
    assert float(np.dot(np.arange(1, len(pmf) + 1), pmf)) == pytest.approx(acc.mean_acceptance_length)
    ref = 1 + acc.sample_accepted(np.random.default_rng(0), 200000)
    for j, p in enumerate(pmf):
        assert (ref == j + 1).mean() == pytest.approx(p, abs=0.005)
    reqs = build_requests(PROFILE, None, 1.0, n_requests=3000, seed=0)
    plan = MtpPlan(PROFILE, reqs, seed=0)
    draws = np.diff(plan.csum)
    for j, p in enumerate(pmf):
        assert (draws == j + 1).mean() == pytest.approx(p, abs=0.01)


def test_mtp_region_overflow_extends_deterministically(monkeypatch):
    import costmodel.modes.mtp as rq

    monkeypatch.setattr(rq, "MTP_REGION_FACTOR", 0.0)
    monkeypatch.setattr(rq, "MTP_REGION_SLACK", 1)
    reqs = build_requests(PROFILE, parse_workload({"output_tokens": 200}), 1.0, n_requests=5, seed=0)
    plan = MtpPlan(PROFILE, reqs, seed=0)
    r = Request(0, 0.0, 100, 200)
    n = plan.steps_for(r, 199)
    assert r.cum is not None and int(r.cum[n]) >= 199 > int(r.cum[n - 1])
    r2 = Request(0, 0.0, 100, 200)
    assert plan.steps_for(r2, 199) == n and (r2.cum == r.cum).all()
    res = run_point(PROFILE, "mtp", 2.0, n_requests=30, workload=parse_workload({"output_tokens": 200}), seed=0)
    assert res.requests.finished.all()
