"""The DiffusionGemma harness on a tiny config (CPU): the hook changes no decision, pass counts match
the generation structure, replay stops canvases on schedule, and run directories round-trip and
resume after an interruption."""

from __future__ import annotations

import json

import click
import numpy as np
import pytest
import torch

from costmodel.errors import UserError
from measure.harness.hook import DiffusionInstrument
from measure.harness.timing import PassTimer
from costmodel.schemas.rundir import load_run
from test_measure_helpers import run_harness, tiny

C = 32  # tiny-diffusiongemma canvas length


@pytest.fixture(scope="module")
def dg():
    return tiny("tiny-diffusiongemma")


def _gen(model, ids, steps, blocks, seed=0, **kw):
    torch.manual_seed(seed)
    return model.generate(ids, max_new_tokens=blocks * C, max_denoising_steps=steps, disable_compile=True, eos_token_id=None, **kw)


def test_hooked_generation_is_identical_to_unhooked(dg):
    ids = torch.randint(10, 500, (2, 12), generator=torch.Generator().manual_seed(1))
    plain = _gen(dg, ids, 4, 2, seed=7).sequences
    with DiffusionInstrument(dg, PassTimer(torch.device("cpu"))) as inst:
        inst.start(2, 12)
        hooked = _gen(dg, ids, 4, 2, seed=7).sequences
        trace = inst.collect(hooked, [], [1, 0])
    assert torch.equal(plain, hooked)
    assert trace.commits  # the hook did record
    assert "_denoising_step" not in dg.__dict__  # wrappers removed on exit
    again = _gen(dg, ids, 4, 2, seed=7).sequences
    assert torch.equal(plain, again)


def test_recorded_entropy_is_the_samplers_formula():
    from measure.harness.hook import entropy_nats

    x = torch.randn(2, 5, 300) * 4
    x[0, 0, 7] = 80.0  # a near-certain position
    assert torch.allclose(entropy_nats(x), torch.distributions.Categorical(logits=x).entropy(), atol=1e-5)


def test_pass_counts_and_shapes_follow_the_generation_structure(dg):
    B, P, blocks, steps = 2, 10, 3, 4
    ids = torch.randint(10, 500, (B, P), generator=torch.Generator().manual_seed(2))
    with DiffusionInstrument(dg, PassTimer(torch.device("cpu"))) as inst:
        inst.start(B, P)
        out = _gen(dg, ids, steps, blocks)
        tr = inst.collect(out.sequences, [], [1, 0])
    kinds = [p["pass_kind"] for p in tr.passes]
    assert kinds.count("encoder_prefill") == 1 and kinds.count("encoder_commit") == blocks - 1
    assert kinds.count("denoise_step") == blocks * steps  # random weights never converge: the full budget
    pre = [p for p in tr.passes if p["pass_kind"] == "encoder_prefill"][0]
    assert (pre["seqs"], pre["tokens_per_seq"], pre["context_tokens"]) == (B, P, 0)
    commits = [p for p in tr.passes if p["pass_kind"] == "encoder_commit"]
    assert [(p["canvas"], p["tokens_per_seq"], p["context_tokens"]) for p in commits] == [(1, C, P), (2, C, P + C)]
    for b in range(blocks):
        ds = [p for p in tr.passes if p["pass_kind"] == "denoise_step" and p["canvas"] == b]
        assert len(ds) == steps and all(p["context_tokens"] == P + C * b and p["tokens_per_seq"] == C for p in ds)
        assert [p["cur_step"] for p in ds] == list(range(steps, 0, -1))
    assert all(p["gpu_ms"] > 0 and p["forward_gpu_ms"] <= p["gpu_ms"] + 1e-6 for p in tr.passes)
    # one accept_canvas record per (row, canvas, step); consistent first acceptances and re-noising
    assert len(tr.commits) == B * blocks * steps
    for (r, c) in {(x["row"], x["canvas"]) for x in tr.commits}:
        rows = sorted((x for x in tr.commits if x["row"] == r and x["canvas"] == c), key=lambda x: x["call"])
        ever, prev = set(), set()
        for x in rows:
            acc = set(x["accepted_positions"])
            assert len(x["accepted_entropy"]) == len(acc) and all(e >= 0 for e in x["accepted_entropy"])
            assert set(x["new_positions"]) == acc - ever and set(x["renoised_positions"]) == prev - acc
            ever |= acc
            prev = acc
    assert len(tr.canvases) == B * blocks
    assert all(g["steps"] == steps and len(g["final_tokens"]) == C for g in tr.canvases)
    seq = out.sequences.numpy()
    g = next(g for g in tr.canvases if g["row"] == 1 and g["canvas"] == 2)
    assert g["final_tokens"] == seq[1, P + 2 * C:P + 3 * C].tolist()


def test_replay_stops_each_row_after_its_scheduled_steps(dg):
    B, P = 2, 8
    plan = [[2, 5], [3, 1]]  # per row, per canvas
    ids = torch.randint(10, 500, (B, P), generator=torch.Generator().manual_seed(3))
    with DiffusionInstrument(dg, PassTimer(torch.device("cpu"))) as inst:
        inst.start(B, P, plan)
        out = _gen(dg, ids, 6, 2)
        tr = inst.collect(out.sequences, [], [1, 0])
    steps = {(g["row"], g["canvas"]): g["steps"] for g in tr.canvases}
    assert steps == {(0, 0): 2, (1, 0): 3, (0, 1): 5, (1, 1): 1}
    per_canvas = [sum(1 for p in tr.passes if p["pass_kind"] == "denoise_step" and p["canvas"] == c) for c in (0, 1)]
    assert per_canvas == [3, 5]  # the batch runs until its slowest row stops
    active = [p["active_seqs"] for p in tr.passes if p["pass_kind"] == "denoise_step" and p["canvas"] == 1]
    assert active == [2, 1, 1, 1, 1]


def test_replay_schedule_from_the_prior_and_from_runs(tmp_path):
    from measure.harness.replay import load_schedule

    s = load_schedule("prior", ["R1", "R4"])
    ks = s.draw(np.random.default_rng(0), "R4", 50, 48)
    assert all(3 <= k <= 17 for k in ks) and s.regime_for(1, 0) == "R4"
    assert s.draw(np.random.default_rng(0), "R1", 5, 4) == [4] * 5  # clipped to the step budget
    out = tmp_path / "rw"
    run_harness("--model", "tiny-diffusiongemma", "--random-weights", "-o", str(out), "--canvases", "1", "--contexts", "8",
                "--blocks", "1", "--max-denoising-steps", "2", "--repeats", "1", "--warmup", "0", "--hook-overhead-repeats", "0",
                "--telemetry-interval-ms", "0")
    with pytest.raises(UserError, match="not the model's"):
        load_schedule(str(out), ["R1"])


def test_run_directory_round_trip(tmp_path):
    out = tmp_path / "run"
    run_harness("--model", "tiny-diffusiongemma", "--random-weights", "-o", str(out), "--canvases", "1,2", "--contexts", "8",
                "--blocks", "2", "--max-denoising-steps", "2", "--repeats", "1", "--hook-overhead-repeats", "1",
                "--roofline-gpu", "h200", "--replay", "prior", "--replay-regimes", "R4", "--telemetry-interval-ms", "0")
    run = load_run(out)
    m = run.manifest
    assert (m.status, m.kind, m.mode, m.weights, m.commit_source) == ("complete", "gpu", "diffusion", "random", "replay")
    assert m.planned_units == ["timing-B1-P8", "hook-overhead", "timing-B2-P8"] and m.done_units == m.planned_units
    assert m.engine["engine"] == "eager" and m.engine["models"]["weights"] == "random"
    assert any("RANDOM WEIGHTS" in n for n in m.notes) and any("REPLAY" in n for n in m.notes)
    passes = run.table("passes")
    timed = passes[~passes["warmup"]]
    assert set(timed["pass_kind"]) == {"encoder_prefill", "encoder_commit", "denoise_step"}
    assert np.allclose(timed["x_roofline"], timed["gpu_ms"] / timed["roofline_ms"])
    gens = run.table("generations")
    assert set(gens["regime"]) == {"R4"} and (gens["steps"] <= 2).all()
    assert len(run.table("commits")) == gens["steps"].sum()
    hook = json.loads((out / "hook_overhead.json").read_text())
    assert hook["identical_outputs"] is True
    summary = json.loads((out / "summary.json").read_text())
    assert {r["pass_kind"] for r in summary["pass_medians"]} == {"encoder_prefill", "encoder_commit", "denoise_step"}
    with pytest.raises(UserError, match="already holds a run"):
        run_harness("--model", "tiny-diffusiongemma", "--random-weights", "-o", str(out))


def test_interrupted_run_is_readable_and_resumes(tmp_path, monkeypatch):
    import measure.harness.diffusion as diffusion

    out = tmp_path / "run"
    args = ["--model", "tiny-diffusiongemma", "--random-weights", "-o", str(out), "--canvases", "1,2,3", "--contexts", "8",
            "--blocks", "1", "--max-denoising-steps", "2", "--repeats", "1", "--warmup", "0", "--hook-overhead-repeats", "0",
            "--telemetry-interval-ms", "0"]
    real = diffusion.timing_cell

    def flaky(ctx, unit, cell):
        if cell.batch == 2:
            raise KeyboardInterrupt
        return real(ctx, unit, cell)

    monkeypatch.setattr(diffusion, "timing_cell", flaky)
    with pytest.raises(click.exceptions.Abort):  # click's form of Ctrl-C; `costmodel` exits 130 on it
        run_harness(*args)
    run = load_run(out)
    assert run.manifest.status == "incomplete" and run.manifest.done_units == ["timing-B1-P8"]
    assert set(run.table("passes")["seqs"]) == {1}
    monkeypatch.setattr(diffusion, "timing_cell", real)
    run_harness(*args, "--resume")
    run = load_run(out)
    assert run.manifest.status == "complete" and sorted(run.manifest.done_units) == ["timing-B1-P8", "timing-B2-P8", "timing-B3-P8"]
    passes = run.table("passes")
    assert passes.groupby("seqs").size().to_dict() == {1: 3, 2: 3, 3: 3}  # prefill + 2 steps each, nothing twice


def test_checkpoint_loading_records_model_commits(tmp_path, dg):
    ckpt = tmp_path / "ckpt"
    dg.save_pretrained(ckpt)
    out = tmp_path / "run"
    run_harness("--model", "tiny-diffusiongemma", "--checkpoint", str(ckpt), "-o", str(out), "--canvases", "1", "--contexts", "8",
                "--blocks", "1", "--max-denoising-steps", "2", "--repeats", "1", "--warmup", "0", "--hook-overhead-repeats", "0",
                "--telemetry-interval-ms", "0")
    m = load_run(out).manifest
    assert (m.weights, m.commit_source, m.model) == ("checkpoint", "model", str(ckpt))
    assert m.engine["models"]["source"] == str(ckpt)


@pytest.mark.parametrize("args, needle", [
    (["--model", "tiny-diffusiongemma"], "no weights"),
    (["--model", "tiny-gemma4", "--random-weights", "--mode", "diffusion"], "needs a DiffusionGemma"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--probe-prompts-per-regime", "2"], "need the checkpoint"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--replay", "nowhere"], "neither 'prior' nor a run"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--canvases", "0"], "below 1"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--engine", "compiled", "--warmup", "0"], "time the compilation"),
    (["--model", "tiny-gemma4", "--random-weights", "--hook-overhead-repeats", "2"], "not used by --mode ar"),
    (["--model", "tiny-gemma4", "--random-weights", "--mode", "mtp", "--mtp-acceptance-rate", "1.5"], "outside 0..1"),
    (["--model", "tiny-gemma4", "--checkpoint", "x", "--mode", "mtp"], "--assistant-checkpoint"),
    (["--model", "no-such-model", "--random-weights"], "not a catalog model"),
    (["--model", "tiny-gemma4", "--random-weights", "--canvases", "2"], "not used by --mode ar"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--draft-tokens", "2"], "not used by --mode diffusion"),
    (["--model", "tiny-diffusiongemma", "--random-weights", "--probe-seeds", "1"], "only used with --probe-prompts"),
])
def test_bad_inputs_are_one_line_user_errors(tmp_path, args, needle):
    with pytest.raises(UserError, match=needle) as e:
        run_harness(*args, "-o", str(tmp_path / "r"))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "r").exists()


def test_options_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, measure.cli.measure_harness, measure.harness.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_checkpoint_probes_record_scored_generations(tmp_path, dg):
    from test_measure_helpers import tiny_tokenizer

    ckpt = tmp_path / "ckpt"
    dg.save_pretrained(ckpt)
    tiny_tokenizer(ckpt)
    out = tmp_path / "run"
    run_harness("--model", "tiny-diffusiongemma", "--checkpoint", str(ckpt), "-o", str(out), "--no-timing-grid",
                "--probe-prompts-per-regime", "1", "--probe-regimes", "R1,R5,R6", "--probe-seeds", "0,1", "--blocks", "1",
                "--max-denoising-steps", "3", "--telemetry-interval-ms", "0")
    run = load_run(out)
    assert (run.manifest.commit_source, run.manifest.status) == ("model", "complete")
    gens = run.table("generations")
    assert sorted(gens["prompt_id"].unique()) == ["r1-01", "r5-01", "r6-01"] and len(gens) == 6
    assert set(gens["split"]) <= {"exploratory", "confirmatory"} and (gens["steps"] == 3).all()
    assert gens.loc[gens["regime"] == "R5", "correct"].isna().all()
    assert gens.loc[gens["regime"] != "R5", "correct"].notna().all()  # scored (random weights: wrong, but scored)
    assert len(run.table("commits")) == 6 * 3
