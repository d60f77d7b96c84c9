"""AR and MTP harness loops on tiny Gemma-4 configs (CPU): pass counts and shapes, greedy outputs
equal to transformers' own greedy `generate`, cache lengths after MTP rollback, and the runs'
manifests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from measure.harness.build import _fixed_kv_sharing_modes, kv_sharing_fix
from measure.harness.causal import CausalEngine, ar_generation, draw_acceptance, mtp_generation
from measure.harness.timing import PassTimer
from costmodel.schemas.rundir import load_run
from test_measure_helpers import run_harness, tiny


@pytest.fixture(scope="module")
def models():
    with kv_sharing_fix():
        target = tiny("tiny-gemma4")
        assistant = tiny("tiny-gemma4-assistant")
    return target, assistant


def _ids(b, p, seed=0):
    return torch.randint(10, 500, (b, p), generator=torch.Generator().manual_seed(seed))


def test_ar_pass_shapes_and_greedy_tokens_match_generate(models):
    target, _ = models
    eng = CausalEngine(target, "eager", PassTimer(torch.device("cpu")))
    ids = _ids(3, 7)
    with torch.no_grad():
        gen = ar_generation(eng, ids, 4)
        ref = target.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids))
    shapes = [(p.kind, p.seqs, p.tokens, p.context) for p in gen.passes]
    assert shapes == [("prefill", 3, 7, 0)] + [("decode_step", 3, 1, 7 + i) for i in range(4)]
    assert torch.equal(gen.sequences, ref)


def test_mtp_greedy_verification_reproduces_ar_greedy_decoding(models):
    target, assistant = models
    eng = CausalEngine(target, "eager", PassTimer(torch.device("cpu")), assistant)
    ids = _ids(1, 9, seed=3)
    with torch.no_grad():
        gen = mtp_generation(eng, ids, k=3, rounds=5, rate=None, rng=np.random.default_rng(0))
        n_new = gen.sequences.shape[1] - 9
        ref = target.generate(ids, max_new_tokens=n_new, do_sample=False, attention_mask=torch.ones_like(ids))
    assert torch.equal(gen.sequences, ref)  # speculative decoding with greedy verification is lossless
    assert len(gen.accepted) == 5 and n_new == 1 + sum(a + 1 for a in gen.accepted)


def test_mtp_pass_counts_shapes_and_rollback(models):
    target, assistant = models
    eng = CausalEngine(target, "eager", PassTimer(torch.device("cpu")), assistant)
    B, P, k, rounds = 2, 9, 3, 3
    with torch.no_grad():
        gen = mtp_generation(eng, _ids(B, P, seed=4), k=k, rounds=rounds, rate=0.6, rng=np.random.default_rng(5))
    kinds = [p.kind for p in gen.passes]
    assert kinds == ["prefill"] + (["draft_step"] * k + ["verify_step"]) * rounds
    L = P + 1
    for r in range(rounds):
        block = gen.passes[1 + r * (k + 1): 1 + (r + 1) * (k + 1)]
        assert all((p.seqs, p.tokens, p.context) == (B, 1, L - 1) for p in block[:k])
        v = block[k]
        assert (v.seqs, v.tokens, v.context) == (B, k + 1, L - 1)
        assert v.extra["accepted_drafts"] == gen.accepted[r] and v.extra["accepted_per_seq"] == [gen.accepted[r]] * B
        L += gen.accepted[r] + 1
    assert gen.sequences.shape == (B, L)
    assert draw_acceptance(np.random.default_rng(0), 4, 1.0) == 4 and draw_acceptance(np.random.default_rng(0), 4, 0.0) == 0


def test_kv_sharing_fix_sets_store_and_reuse_layers_and_restores_the_property():
    from transformers import Gemma4TextConfig

    from costmodel.models import TEXT_26B_A4B

    cfg = Gemma4TextConfig(**TEXT_26B_A4B, enable_moe_block=True, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)
    modes = _fixed_kv_sharing_modes(cfg)
    assert modes[28] == "store" and modes[29] == "store" and modes.count("store") == 2 and "reuse" not in modes
    before = Gemma4TextConfig.__dict__["kv_sharing_modes"]
    with kv_sharing_fix():
        assert Gemma4TextConfig.__dict__["kv_sharing_modes"] is not before
    assert Gemma4TextConfig.__dict__["kv_sharing_modes"] is before


def test_full_size_parameter_counts_on_the_meta_device():
    from costmodel.models import MODELS
    from measure.harness.build import meta_param_count

    assert meta_param_count(MODELS["gemma4-26b-a4b"]) / 1e9 == pytest.approx(25.233, abs=0.002)  # published 25.2B
    assert meta_param_count(MODELS["gemma4-26b-a4b-assistant"]) == pytest.approx(MODELS["gemma4-26b-a4b-assistant"].total_params, rel=1e-4)


def test_ar_and_mtp_runs_write_their_passes(tmp_path):
    out = tmp_path / "ar"
    run_harness("--model", "tiny-gemma4", "--random-weights", "-o", str(out), "--decode-batches", "1,2", "--contexts", "6",
                "--decode-steps", "3", "--repeats", "1", "--roofline-gpu", "h200", "--telemetry-interval-ms", "0")
    run = load_run(out)
    assert (run.manifest.mode, run.manifest.commit_source, run.manifest.status) == ("ar", "none", "complete")
    p = run.table("passes")
    timed = p[~p["warmup"]]
    assert timed.groupby(["seqs", "pass_kind"]).size().to_dict() == {(1, "decode_step"): 3, (1, "prefill"): 1, (2, "decode_step"): 3, (2, "prefill"): 1}
    assert timed["roofline_ms"].gt(0).all()

    out = tmp_path / "mtp"
    run_harness("--model", "tiny-gemma4", "--mode", "mtp", "--random-weights", "-o", str(out), "--decode-batches", "2",
                "--contexts", "6", "--draft-tokens", "1,2", "--mtp-rounds", "2", "--repeats", "1", "--warmup", "0",
                "--roofline-gpu", "h200", "--telemetry-interval-ms", "0")
    run = load_run(out)
    m = run.manifest
    assert m.planned_units == ["timing-B2-P6-k1", "timing-B2-P6-k2"]
    assert "NOT measured" in m.settings["mtp_acceptance_source"] and m.settings["mtp_acceptance_rate"] == 0.8
    p = run.table("passes")
    assert p.groupby(["draft_tokens", "pass_kind"]).size().to_dict() == {
        (1.0, "draft_step"): 2, (1.0, "verify_step"): 2, (2.0, "draft_step"): 4, (2.0, "verify_step"): 2}
    assert set(p.loc[p["pass_kind"] == "verify_step", "tokens_per_seq"]) == {2, 3}
    assert p.loc[p["pass_kind"] == "draft_step", "roofline_ms"].gt(0).all()


def test_mtp_checkpoint_probes_measure_greedy_acceptance(tmp_path, models):
    from test_measure_helpers import tiny_tokenizer

    target, assistant = models
    t_dir, a_dir = tmp_path / "target", tmp_path / "assistant"
    target.save_pretrained(t_dir)
    assistant.save_pretrained(a_dir)
    tiny_tokenizer(t_dir)
    out = tmp_path / "run"
    run_harness("--model", "tiny-gemma4", "--mode", "mtp", "--checkpoint", str(t_dir), "--assistant-checkpoint", str(a_dir),
                "-o", str(out), "--no-timing-grid", "--probe-prompts-per-regime", "1", "--probe-regimes", "R1,R4",
                "--probe-seeds", "0", "--draft-tokens", "2", "--mtp-rounds", "3", "--roofline-gpu", "h200", "--telemetry-interval-ms", "0")
    run = load_run(out)
    m = run.manifest
    assert (m.weights, m.status, m.planned_units) == ("checkpoint", "complete", ["probe-r1-01", "probe-r4-01"])
    assert m.settings["mtp_acceptance_source"].startswith("greedy")
    v = run.table("passes").query("pass_kind == 'verify_step'")
    assert len(v) >= 2 and set(v["regime"]) == {"R1", "R4"} and v["correct"].notna().all()
    counts = __import__("json").loads((out / "mtp_acceptance_k2.json").read_text())
    assert counts["num_drafts"] == len(v) and len(counts["num_accepted_tokens_per_pos"]) == 2
