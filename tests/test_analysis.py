"""The commit-order lens on synthetic traces with known answers: every published trap handled."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.errors import UserError
from measure.analyze.core import BIN_SIZES, POOLED, analyze_tables
from measure.analyze.report import Source, render_markdown, summary_blocks
from measure.analyze.rank_stats import ClusterBootstrap, auroc, same_call_pair_fraction, tau_b, tied_sequential_tau_b, weighted_auroc
from measure.analyze.synthetic_commits import RegimeSpec, make_tables

B = 200  # bootstrap resamples in tests


def run(specs, prompts=6, seeds=2, seed=0, **kw):
    commits, gens = make_tables(specs, prompts=prompts, seeds=seeds, seed=seed)
    return analyze_tables(commits, gens, bootstrap=kw.pop("bootstrap", B), **kw)


def regime(a, name):
    return a.regimes.set_index("regime").loc[name]


# -- statistics -------------------------------------------------------------------------------------

def test_tied_sequential_closed_form_matches_scipy_tau_b():
    for L in (17, 40, 100, 150, 200, 256):
        for block in (4, 16, 64):
            if block >= L:
                continue
            pos = np.arange(L)
            assert tau_b(pos // block, pos) == pytest.approx(tied_sequential_tau_b(L, block), abs=1e-12)
    # the study's control (~0.94-0.96) is this formula at its content lengths: L=150 and L=200 by hand
    assert tied_sequential_tau_b(200, 16) == pytest.approx(math.sqrt(1 - (12 * 120 + 28) / 19900), abs=1e-12)
    assert 0.962 < tied_sequential_tau_b(200, 16) < 0.963
    assert 0.949 < tied_sequential_tau_b(150, 16) < 0.950
    assert math.isnan(tied_sequential_tau_b(16, 16)) and math.isnan(tau_b(np.zeros(16), np.arange(16)))


def test_same_call_pair_fraction():
    assert same_call_pair_fraction(np.array([0, 0, 1, 1])) == pytest.approx(2 / 6)
    assert same_call_pair_fraction(np.arange(10)) == 0.0
    assert same_call_pair_fraction(np.zeros(7)) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(0, 3)), min_size=2, max_size=25))
def test_weighted_auroc_equals_mann_whitney_on_repeated_data(obs):
    scores = np.array([o[0] for o in obs], dtype=float)
    labels = np.array([o[1] for o in obs])
    weights = np.array([o[2] for o in obs])
    expected = auroc(np.repeat(scores, weights), np.repeat(labels, weights))
    got = weighted_auroc(scores, labels, weights[None, :])[0]
    assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected, abs=1e-12)


def test_bootstrap_resamples_prompts_not_seeds():
    """Seeds of a prompt differ (0 and 1) but every prompt averages 0.5: a prompt-clustered
    bootstrap of the mean cannot move, a seed-level one would."""
    prompts = 8
    cluster = np.repeat(np.arange(prompts), 2)
    values = np.tile([0.0, 1.0], prompts)
    boot = ClusterBootstrap.draw(prompts, 500, np.random.default_rng(1))
    assert boot.weights.sum(axis=1).tolist() == [prompts] * 500
    lo, hi = boot.mean_ci(values, cluster)
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)


# -- known answers ----------------------------------------------------------------------------------

def test_strictly_sequential_is_one_and_reversed_is_minus_one():
    a = run([RegimeSpec("SEQ", "sequential", (30, 70)), RegimeSpec("REV", "reversed", (30, 70))])
    seq, rev = regime(a, "SEQ"), regime(a, "REV")
    assert seq.tau_b_content_mean == pytest.approx(1.0) and (seq.tau_b_content_ci_lo, seq.tau_b_content_ci_hi) == pytest.approx((1.0, 1.0))
    assert rev.tau_b_content_mean == pytest.approx(-1.0) and (rev.tau_b_content_ci_lo, rev.tau_b_content_ci_hi) == pytest.approx((-1.0, -1.0))
    assert seq.tau_b_content_seed_sd == pytest.approx(0.0)
    assert seq.same_call_pair_frac_mean == 0.0 and seq.tokens_per_accept_call_mean < 1.0  # one content position per call, plus the pad call
    # the bin sweep of a one-per-call order is the tied formula with the ties on the position side
    c = a.canvases[a.canvases.regime == "SEQ"]
    for b in BIN_SIZES[1:]:
        expected = [tied_sequential_tau_b(L, b) for L in c.content_positions]
        got = c["tau_b_bin%d" % b].to_numpy()
        assert np.allclose(np.nan_to_num(got, nan=-9), np.nan_to_num(expected, nan=-9), atol=1e-12)


def test_block_sequential_control_lands_on_its_closed_form():
    a = run([RegimeSpec("BLK", "block", (150, 230))], prompts=8, seeds=3)
    c = a.canvases
    expected = np.array([tied_sequential_tau_b(L, 16) for L in c.content_positions])
    assert np.allclose(c.tau_b_block_seq_control, expected, atol=1e-12)
    assert np.allclose(c.tau_b_content, expected, atol=1e-12)  # an order that *is* block-sequential scores the control
    assert np.allclose(c.tau_b_bin16, 1.0)  # ... and 1.0 on a ruler of its own block size
    r = regime(a, "BLK")
    assert r.tau_b_block_seq_control_mean == pytest.approx(expected.mean(), abs=1e-12)
    assert 0.94 < r.tau_b_block_seq_control_mean < 0.97  # the study's 0.94-0.96 at these lengths
    assert r.tokens_per_accept_call_mean == pytest.approx((c.content_positions / c.accept_calls).mean())


def test_random_order_is_near_zero():
    a = run([RegimeSpec("RND", "random", (120, 200), tokens_per_call=8)], prompts=20, seeds=3)
    r = regime(a, "RND")
    assert abs(r.tau_b_content_mean) < 0.03  # per-canvas SD ~0.05 over 60 canvases
    assert r.tau_b_content_ci_hi - r.tau_b_content_ci_lo < 0.06
    assert abs(a.bin_sweep.tau_b_mean).max() < 0.05
    assert r.tau_b_block_seq_control_mean > 0.9  # the control does not depend on the measured order


def test_trailing_pad_committed_first_flips_raw_tau_but_not_content():
    spec = RegimeSpec("PAD", "noisy", (30, 80), tokens_per_call=4, jitter_positions=8, pad="first", pad_calls=8)
    first = run([spec])
    never = run([RegimeSpec("PAD", "noisy", (30, 80), tokens_per_call=4, jitter_positions=8, pad="never")])
    assert np.allclose(first.canvases.tau_b_content, never.canvases.tau_b_content, atol=1e-12)
    assert regime(first, "PAD").tau_b_content_mean > 0.5
    assert regime(first, "PAD").tau_b_raw_canvas_mean < -0.8  # the study's raw-canvas ~ -0.9
    assert regime(never, "PAD").tau_b_raw_canvas_mean == pytest.approx(regime(never, "PAD").tau_b_content_mean)
    # a single pad call already makes the raw figure negative
    one = run([RegimeSpec("PAD", "noisy", (30, 80), tokens_per_call=4, jitter_positions=8, pad="first", pad_calls=1)])
    assert regime(one, "PAD").tau_b_raw_canvas_mean < 0 < regime(one, "PAD").tau_b_content_mean


def test_monotone_only_subset_and_renoise_counts():
    """One regime, two kinds of canvas: monotone sequential ones and re-noised random ones."""
    specs = [RegimeSpec("M", "sequential", (30, 60), label="a"), RegimeSpec("M", "random", (30, 60), renoise_per_canvas=3, label="b")]
    a = run(specs, prompts=4, seeds=2)
    r = regime(a, "M")
    assert r.monotone_canvases == 8 and r.canvases == 16
    assert r.renoise_events_content_total == 3 * 8 and r.renoise_events_content_per_generation == pytest.approx(1.5)
    assert r.tau_b_monotone_mean == pytest.approx(1.0)
    assert r.tau_b_monotone_ci_lo <= 1.0 <= r.tau_b_monotone_ci_hi + 1e-12
    assert r.tau_b_content_mean < 0.75  # the re-noised random half pulls the all-canvas mean down
    assert a.checks.problems() == []


def test_seed_sd_across_seeds():
    """Seed 0 strictly sequential, seed 1 reversed: per-seed means +1 and -1, SD sqrt(2)."""
    sc, sg = make_tables([RegimeSpec("S", "sequential", (20, 40))], prompts=4, seeds=2, seed=3)
    rc, rg = make_tables([RegimeSpec("S", "reversed", (20, 40))], prompts=4, seeds=2, seed=3)
    g = pd.concat([sg[sg.seed == 0], rg[rg.seed == 1]], ignore_index=True)
    c = pd.concat([sc[sc.gen_id.isin(sg.gen_id[sg.seed == 0])], rc[rc.gen_id.isin(rg.gen_id[rg.seed == 1])]], ignore_index=True)
    r = regime(analyze_tables(c, g, bootstrap=B), "S")
    assert r.tau_b_content_seed_sd == pytest.approx(math.sqrt(2))
    assert r.tau_b_content_mean == pytest.approx(0.0, abs=1e-12)


def test_simpsons_paradox_pooled_auroc_below_half_while_every_regime_above():
    """A: confident and mostly wrong; B: unsure and mostly right; within each, confidence predicts."""
    specs = [RegimeSpec("A", "noisy", (40, 80), tokens_per_call=8, entropy_nats=(0.001, 0.003), accuracy=0.2, label_noise=0.05),
             RegimeSpec("B", "noisy", (40, 80), tokens_per_call=8, entropy_nats=(0.010, 0.020), accuracy=0.85, label_noise=0.05)]
    a = run(specs, prompts=12, seeds=4)
    au = a.auroc.set_index("regime")
    assert au.loc["A", "auroc"] > 0.5 and au.loc["B", "auroc"] > 0.5
    assert au.loc[POOLED, "auroc"] < 0.5 and au.loc[POOLED, "scope"] == "pooled"
    for name in ("A", "B", POOLED):
        assert au.loc[name, "auroc_ci_lo"] <= au.loc[name, "auroc"] <= au.loc[name, "auroc_ci_hi"]
    assert regime(a, "A").auroc == pytest.approx(au.loc["A", "auroc"])  # merged into the regime table
    md = render_markdown(summary_blocks(a, Source("x"), []))
    assert "Simpson's paradox" in md and "Here it does" in md
    # the pooled row never stands alone: it comes after every regime row
    section = md.split("## Commit confidence vs correctness")[1].split("##")[0]
    rows = [ln.split(" | ")[0] for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert rows == ["| A", "| B", f"| {POOLED}: do not use alone"]


def test_bootstrap_cis_contain_their_point_estimates():
    specs = [RegimeSpec("N1", "noisy", (60, 160), tokens_per_call=10, renoise_per_canvas=1, accuracy=0.6, label_noise=0.2),
             RegimeSpec("N2", "noisy", (20, 60), tokens_per_call=4, jitter_positions=10, accuracy=0.5, label_noise=0.3)]
    a = run(specs, prompts=8, seeds=3)
    for x in a.regimes.itertuples():
        assert x.tau_b_content_ci_lo <= x.tau_b_content_mean <= x.tau_b_content_ci_hi
        assert x.tau_b_raw_canvas_ci_lo <= x.tau_b_raw_canvas_mean <= x.tau_b_raw_canvas_ci_hi
        assert x.auroc_ci_lo <= x.auroc <= x.auroc_ci_hi and x.auroc_ci_hi - x.auroc_ci_lo > 0
    s = a.bin_sweep.dropna()
    assert ((s.tau_b_ci_lo <= s.tau_b_mean) & (s.tau_b_mean <= s.tau_b_ci_hi)).all()
    # same bootstrap seed, same answer; another bootstrap seed, other resamples
    assert run(specs, prompts=8, seeds=3).regimes.equals(a.regimes)
    moved = analyze_tables(*make_tables(specs, prompts=8, seeds=3, seed=0), bootstrap=B, seed=5)
    assert not np.allclose(moved.regimes.tau_b_content_ci_lo, a.regimes.tau_b_content_ci_lo)


# -- data handling ----------------------------------------------------------------------------------

def test_split_selection_and_errors():
    commits, gens = make_tables([RegimeSpec("R", "noisy", (40, 80), tokens_per_call=5)], prompts=6, seeds=2)
    conf = analyze_tables(commits, gens, split="confirmatory", bootstrap=B)
    assert set(conf.canvases.split) == {"confirmatory"} and len(conf.canvases) == 6
    assert conf.checks.problems() == [] and conf.checks.commit_rows == commits.gen_id.isin(gens.gen_id[gens.split == "confirmatory"]).sum()
    assert len(analyze_tables(commits, gens, split="all", bootstrap=B).canvases) == 12
    with pytest.raises(UserError, match="unknown split"):
        analyze_tables(commits, gens, split="train")
    with pytest.raises(UserError, match="no confirmatory generations"):
        analyze_tables(commits, gens[gens.split == "exploratory"], split="confirmatory")
    with pytest.raises(UserError, match="below 1"):
        analyze_tables(commits, gens, bootstrap=0)
    with pytest.raises(UserError, match="lacks columns"):
        analyze_tables(commits.drop(columns=["accepted_entropy"]), gens)
    with pytest.raises(UserError, match="duplicate"):
        analyze_tables(commits, pd.concat([gens, gens.iloc[:1]]))


def drop_position(commits, gen_id, position):
    """The canvas `gen_id` as if `position` had never been accepted (entropy kept aligned)."""
    out = commits.copy()

    def strip(row):
        if row.gen_id != gen_id:
            return row
        keep = [k for k, p in enumerate(row.accepted_positions) if p != position]
        row = row.copy()
        row["accepted_positions"] = [row.accepted_positions[k] for k in keep]
        row["accepted_entropy"] = [row.accepted_entropy[k] for k in keep]
        row["new_positions"] = [p for p in row.new_positions if p != position]
        return row

    return out.apply(strip, axis=1)


def test_never_accepted_positions_are_left_out_and_counted():
    commits, gens = make_tables([RegimeSpec("R", "sequential", (30, 40))], prompts=2, seeds=1)
    g0 = gens.gen_id.iloc[0]
    a = analyze_tables(drop_position(commits, g0, 5), gens, bootstrap=B)
    c = a.canvases.set_index("gen_id").loc[g0]
    assert c.content_positions_accepted == c.content_positions - 1
    assert c.content_coverage_frac == pytest.approx((c.content_positions - 1) / c.content_positions)
    assert c.tau_b_content == pytest.approx(1.0)
    assert a.checks.problems() == []
    md = render_markdown(summary_blocks(a, Source("x"), []))
    assert "Content coverage below 1" in md


def test_corrupted_hook_records_are_counted():
    commits, gens = make_tables([RegimeSpec("R", "sequential", (30, 40))], prompts=2, seeds=1)
    g0 = gens.gen_id.iloc[0]
    bad = commits.copy()
    r0, r1 = bad.index[bad.gen_id == g0][:2]  # call 0 accepts the pads, call 1 content position 0
    bad["accepted_entropy"] = [list(e)[:-1] if i == r0 else e for i, e in zip(bad.index, bad.accepted_entropy)]
    bad["new_positions"] = [[] if i == r1 else v for i, v in zip(bad.index, bad.new_positions)]
    bad["renoised_positions"] = [[10] if i == r1 else v for i, v in zip(bad.index, bad.renoised_positions)]  # never accepted before
    checks = analyze_tables(bad, gens, bootstrap=B).checks
    assert checks.entropy_length_mismatch_rows == 1 and checks.new_positions_mismatch_rows == 1
    assert checks.renoised_not_accepted_before == 1 and len(checks.problems()) == 3
    orphan = analyze_tables(commits, gens.iloc[1:], bootstrap=B).checks
    assert orphan.orphan_commit_canvases == 1 and orphan.canvases_with_commits == 1
    md = render_markdown(summary_blocks(analyze_tables(bad, gens, bootstrap=B), Source("x"), []))
    assert "Problems found" in md and "new_positions differ" in md


def test_multi_canvas_generation_sums_calls_and_keeps_canvases_apart():
    commits, gens = make_tables([RegimeSpec("R", "reversed", (30, 40))], prompts=2, seeds=1)
    second_c = commits.assign(canvas=1)
    second_g = gens.assign(canvas=1)
    a = analyze_tables(pd.concat([commits, second_c]), pd.concat([gens, second_g]), bootstrap=B)
    assert len(a.canvases) == 4 and len(a.generations) == 2
    assert (a.generations.canvases == 2).all()
    one = analyze_tables(commits, gens, bootstrap=B)
    assert np.array_equal(a.generations.accept_calls.to_numpy(), 2 * one.generations.accept_calls.to_numpy())
    assert regime(a, "R").tau_b_content_mean == pytest.approx(-1.0)


def test_random_weights_shaped_hook_data():
    """What the H200 random-weights campaign records: one position accepted per call (the previous
    one re-noised), 48 calls, no EOS on the canvas, so most positions are never accepted."""
    rng = np.random.default_rng(7)
    commits, gens = [], []
    for p in range(5):
        for s in range(2):
            gid = f"rw-p{p}-s{s}"
            picks = rng.integers(0, 256, 48)
            seen: set[int] = set()
            for call, pos in enumerate(picks.tolist()):
                prev = [int(picks[call - 1])] if call and picks[call - 1] != pos else []
                commits.append({"gen_id": gid, "canvas": 0, "call": call, "cur_step": call, "accepted_positions": [pos], "accepted_entropy": [11.5],
                                "new_positions": [] if pos in seen else [pos], "renoised_positions": prev})
                seen.add(pos)
            gens.append({"gen_id": gid, "regime": "R1", "prompt_id": f"p{p}", "seed": s, "split": "exploratory", "canvas": 0, "steps": 48,
                         "content_length": 256, "final_tokens": rng.integers(3, 1000, 256).tolist(), "eos_positions": []})
    a = analyze_tables(pd.DataFrame(commits), pd.DataFrame(gens), bootstrap=B)
    r = regime(a, "R1")
    assert a.checks.problems() == []
    assert r.content_positions_mean == 256 and r.accept_calls_per_generation_mean == 48
    assert r.content_coverage_frac_mean < 48 / 256 + 1e-12
    assert r.renoise_events_content_total == sum(len(c["renoised_positions"]) for c in commits) and r.monotone_canvases == 0
    assert abs(r.tau_b_content_mean) < 0.15 and r.tokens_per_accept_call_mean <= 1.0
    assert r.commit_entropy_mean_nats == pytest.approx(11.5)
    assert r.tau_b_raw_canvas_mean == pytest.approx(r.tau_b_content_mean)  # no EOS/pad: raw and content coincide


def test_short_canvases_leave_the_control_and_wide_bins_undefined_and_say_so():
    a = run([RegimeSpec("S", "noisy", (8, 16), tokens_per_call=2, jitter_positions=3)])
    r = regime(a, "S")
    assert math.isnan(r.tau_b_block_seq_control_mean)
    assert any("S: 12 of 12 canvases have at most 16 content positions" in n for n in a.notes)
    sweep = a.bin_sweep.set_index("bin_positions")
    assert sweep.loc[64, "canvases_defined"] == 0 and math.isnan(sweep.loc[64, "tau_b_mean"])
    md = render_markdown(summary_blocks(a, Source("x"), []))
    assert "## Notes" in md and "n/a" in md
