"""Commit statistics come only from the model's own commits; MTP acceptance from vLLM counters."""

import json

import pytest

from costmodel.errors import UserError
from measure.fit.assemble import FitOptions, build_profile
from measure.fit.commits import choose_commit_stats, commit_stats_from_runs
from measure.fit.mtp import choose_mtp_acceptance, load_mtp_acceptance
from measure.fit.synthetic_runs import write_synthetic_run
from costmodel.prior import published_commit_prior
from costmodel.schemas.rundir import RunManifest, RunWriter, load_run


def gen(gen_id, regime, steps, content, eos):
    return {"gen_id": gen_id, "regime": regime, "prompt_id": gen_id, "seed": 0, "split": "exploratory", "canvas": 0, "steps": steps,
            "content_length": content, "final_tokens": list(range(8)), "eos_positions": eos}


def call(gen_id, i, accepted, entropy, new, renoised):
    return {"gen_id": gen_id, "canvas": 0, "call": i, "cur_step": i, "accepted_positions": accepted, "accepted_entropy": entropy,
            "new_positions": new, "renoised_positions": renoised}


def commit_run(path, commit_source="model"):
    man = RunManifest(run_id=f"commits-{commit_source}", kind="gpu", mode="diffusion", model="diffusiongemma-26b-a4b",
                      weights="checkpoint" if commit_source == "model" else "random", commit_source=commit_source, hardware="h200")
    with RunWriter(path, man) as w:
        # g1: EOS positions 4-7 commit first (trap 1); content position 1 is accepted, then re-noised (a re-mask)
        w.add("generations", gen("g1", "R1", 3, 4, [4, 5, 6, 7]))
        w.add("commits", [
            call("g1", 0, [4, 5, 6, 7], [0.0] * 4, [4, 5, 6, 7], [0, 1, 2, 3]),
            call("g1", 1, [0, 1, 4, 5, 6, 7], [0.001, 0.003, 0, 0, 0, 0], [0, 1], [2, 3]),
            call("g1", 2, [0, 2, 3, 4, 5, 6, 7], [0.001, 0.005, 0.007, 0, 0, 0, 0], [2, 3], [1]),
        ])
        w.add("generations", gen("g2", "R1", 2, 6, [6, 7]))
        w.add("commits", [
            call("g2", 0, [0, 1, 2, 3, 4, 5], [0.002] * 6, [0, 1, 2, 3, 4, 5], [6, 7]),
            call("g2", 1, [0, 1, 2, 3, 4, 5, 6, 7], [0.002] * 6 + [0, 0], [6, 7], []),
        ])
        w.add("generations", gen("g3", "R4", 4, 2, [2, 3, 4, 5, 6, 7]))
        w.add("commits", call("g3", 0, [0, 1], [0.004, 0.004], [0, 1], [2, 3, 4, 5, 6, 7]))
        # a timing-grid generation (random-token prompt, EOS off): not the model's behaviour on a task
        w.add("generations", {**gen("t1", "grid", 48, 256, []), "prompt_id": "random-P1024"})
        w.finish_unit("all")
    return load_run(path)


def test_commit_stats_from_a_model_run(tmp_path):
    stats = commit_stats_from_runs([commit_run(tmp_path / "m")])
    r1 = stats["R1"]
    assert r1.steps_per_canvas.values == [2.0, 3.0] and r1.steps_per_canvas.probs == [0.5, 0.5]
    assert r1.content_length.values == [4.0, 6.0]
    assert r1.tokens_per_call == pytest.approx((4 + 6) / (3 + 2))
    assert r1.renoise_per_generation == pytest.approx(0.5)  # one re-mask of a content position over two generations
    # content positions' first-acceptance entropies: 0.001, 0.003, 0.005, 0.007 and six 0.002 (EOS positions excluded)
    assert r1.commit_entropy_nats == pytest.approx(0.002)
    assert r1.provenance.kind == "measured" and "commits-model" in r1.provenance.source
    assert stats["R4"].renoise_per_generation == 0 and stats["R4"].description.startswith("short factual")
    assert set(stats) == {"R1", "R4"}  # the timing grid's generation is left out


def test_random_weights_commits_are_refused_as_the_models(tmp_path):
    rnd = commit_run(tmp_path / "r", "random-weights")
    with pytest.raises(UserError, match="random weights"):
        commit_stats_from_runs([rnd])
    with pytest.raises(UserError, match="drop it from --commit-runs"):
        choose_commit_stats([], [rnd])
    # as a fit run it is simply not used: the published prior is, and the messages say so
    stats, msgs = choose_commit_stats([rnd], [])
    assert stats["R1"].provenance.kind == "published"
    assert any("not the model's" in m for m in msgs) and any("published prior" in m for m in msgs)
    with pytest.raises(UserError, match="replayed"):
        commit_stats_from_runs([commit_run(tmp_path / "p", "replay")])
    man = RunManifest(run_id="grid-only", kind="gpu", mode="diffusion", model="diffusiongemma-26b-a4b", weights="checkpoint",
                      commit_source="model", hardware="h200")
    with RunWriter(tmp_path / "g", man) as w:
        w.add("generations", {**gen("t1", "grid", 48, 256, []), "prompt_id": "random-P1024"})
        w.finish_unit("a")
    with pytest.raises(UserError, match="only timing-grid generations"):
        commit_stats_from_runs([load_run(tmp_path / "g")])


def test_measured_regimes_override_the_prior_the_rest_stay_published(tmp_path):
    model = commit_run(tmp_path / "m")
    stats, msgs = choose_commit_stats([], [model])
    assert stats["R1"].provenance.kind == "measured" and stats["R4"].provenance.kind == "measured"
    assert {r for r, c in stats.items() if c.provenance.kind == "published"} == set(published_commit_prior()) - {"R1", "R4"}
    # through the whole fit: a synthetic timing run plus the model's commit run
    timing = write_synthetic_run(tmp_path / "t", "diffusion", {k: {"const": 1.0, "roofline_ms": 2.0}
                                                             for k in ("encoder_prefill", "denoise_step", "encoder_commit")})
    p = build_profile([timing], FitOptions(commit_runs=[str(tmp_path / "m")], heldout="none")).profile
    assert p.commit_stats["R1"].provenance.kind == "measured" and p.commit_stats["R2"].provenance.kind == "published"


PROM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="g"}} {drafts}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="g",position="0"}} {a0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="g",position="1"}} {a1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="g",position="2"}} {a2}
"""


def test_mtp_acceptance_from_vllm_counters(tmp_path):
    before, after = tmp_path / "before.prom", tmp_path / "after.prom"
    before.write_text(PROM.format(drafts=100, a0=90, a1=80, a2=70))
    after.write_text(PROM.format(drafts=1100, a0=990, a1=800, a2=610))
    a = load_mtp_acceptance([str(after)])
    assert a.num_speculative_tokens == 3
    assert a.per_position == pytest.approx([0.9, 800 / 990, 610 / 800])
    d = load_mtp_acceptance([str(before), str(after)])  # deltas: 1000 drafts, 900 / 720 / 540 accepted
    assert d.per_position == pytest.approx([0.9, 0.8, 0.75])
    assert d.mean_acceptance_length == pytest.approx(1 + 0.9 + 0.72 + 0.54)
    assert d.provenance.kind == "endpoint"
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"num_drafts": 10, "num_accepted_tokens_per_pos": [8, 4], "source": "bench"}))
    assert load_mtp_acceptance([str(js)]).per_position == pytest.approx([0.8, 0.5])
    (tmp_path / "endpoint-run").mkdir()
    js.rename(tmp_path / "endpoint-run" / "mtp_counters.json")  # an endpoint run directory holds it under this name
    assert load_mtp_acceptance([str(tmp_path / "endpoint-run")]).per_position == pytest.approx([0.8, 0.5])
    with pytest.raises(UserError, match="without mtp_counters.json"):
        load_mtp_acceptance([str(tmp_path)])
    default, msg = choose_mtp_acceptance(None)
    assert default.per_position == [0.8] * 4 and "stated default" in msg
    bad = tmp_path / "bad.prom"
    bad.write_text("vllm:num_requests_running 3\n")
    with pytest.raises(UserError, match="no vllm:spec_decode"):
        load_mtp_acceptance([str(bad)])
    with pytest.raises(UserError, match="decreased"):
        load_mtp_acceptance([str(after), str(before)])  # swapped: negative deltas
    bad.write_text(PROM.format(drafts=10, a0=5, a1=6, a2=1))
    with pytest.raises(UserError, match="inconsistent"):
        load_mtp_acceptance([str(bad)])
