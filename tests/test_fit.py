"""`costmodel fit`: the pass-cost fit recovers a known cost model, never predicts below the
roofline, flags extrapolation, and refuses inputs it cannot honestly turn into a profile."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from costmodel.errors import UserError
from measure.fit.assemble import FitOptions, build_profile, campaign_runs, resolve_model
from measure.fit.passes import HeldoutSpec, shape_of
from measure.fit.synthetic_runs import truth_ms, write_synthetic_run
from costmodel.roofline import Segment

DIFF_TRUTH = {
    "denoise_step": {"const": 1.2, "roofline_ms": 3.1},
    "encoder_prefill": {"const": 2.0, "memory_ms": 2.0, "compute_ms": 1.5},
    "encoder_commit": {"const": 1.0, "memory_ms": 2.5, "compute_ms": 1.2},
}
AR_TRUTH = {
    "prefill": {"const": 2.0, "memory_ms": 2.0, "compute_ms": 1.5},
    "decode_step": {"const": 3.0, "memory_ms": 1.6, "compute_ms": 2.0},
}
MTP_TRUTH = {
    "prefill": AR_TRUTH["prefill"],
    "draft_step": {"const": 0.8, "roofline_ms": 2.5},
    "verify_step": {"const": 3.2, "memory_ms": 1.6, "compute_ms": 2.1},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {
        "diffusion": write_synthetic_run(root / "diff", "diffusion", DIFF_TRUTH, seed=1),
        "ar": write_synthetic_run(root / "ar", "ar", AR_TRUTH, seed=2),
        "mtp": write_synthetic_run(root / "mtp", "mtp", MTP_TRUTH, seed=3),
    }


@pytest.fixture(scope="module")
def fitted(runs):
    return build_profile([runs["diffusion"], runs["ar"], runs["mtp"]], FitOptions())


def test_fit_recovers_the_known_cost_model(fitted):
    p = fitted.profile
    den = fitted.fits["denoise_step"]
    assert den.features == ("const", "roofline_ms")
    assert den.model.coef["roofline_ms"] == pytest.approx(3.1, rel=0.03)
    assert den.model.coef["const"] == pytest.approx(1.2, abs=0.6)
    dec = fitted.fits["decode_step"].model.coef
    assert dec == pytest.approx(AR_TRUTH["decode_step"], rel=0.1)
    for kind, f in fitted.fits.items():
        d = f.model.diagnostics
        assert d.heldout_mape_pct is not None and d.heldout_mape_pct < 3.0, kind
        assert d.cv_mape_pct < 3.0 and d.r2 > 0.99, kind
        assert "WLS" in d.summary and "const" in d.summary or "memory_ms" in d.summary
        assert f.model.provenance.kind == "measured" and "SYNTHETIC" in f.model.provenance.source
    # an unseen shape inside the support is predicted within a few percent of the truth
    for mode, kind, truth, shape in [("diffusion", "denoise_step", DIFF_TRUTH, (12, 256, 1000)),
                                     ("ar", "decode_step", AR_TRUTH, (24, 1, 1500)),
                                     ("mtp", "verify_step", MTP_TRUTH, (24, 5, 1500))]:
        want = truth_ms(p.roofline(mode), kind, shape, truth[kind])
        assert p.pass_ms(mode, (Segment(kind, *shape),)) == pytest.approx(want, rel=0.04)
    assert "synthetic" in p.profile_id and any("SYNTHETIC" in n for n in p.notes)
    assert set(p.modes) == {"diffusion", "ar", "mtp"}


def test_warmup_rows_are_dropped_and_medians_used(fitted):
    den = fitted.fits["denoise_step"]
    assert den.n_rows == 3 * den.n_shapes  # 3 timed repeats per shape; the 5x-slow warm-up rows are gone
    assert den.model.diagnostics.n_obs == den.n_shapes
    assert den.model.median_x_roofline == pytest.approx(3.2, abs=0.3)
    assert any("warm-up" in m for m in fitted.messages)


@settings(max_examples=40, deadline=None)
@given(seqs=st.integers(1, 1024), tokens=st.integers(1, 4096), context=st.integers(0, 65536),
       kind=st.sampled_from(["denoise_step", "encoder_prefill", "encoder_commit", "decode_step", "prefill", "verify_step", "draft_step"]))
def test_predictions_never_below_roofline(fitted, seqs, tokens, context, kind):
    mode = {"denoise_step": "diffusion", "encoder_prefill": "diffusion", "encoder_commit": "diffusion",
            "decode_step": "ar", "prefill": "ar"}.get(kind, "mtp")
    seg = (Segment(kind, seqs, tokens, context),)
    p = fitted.profile
    assert p.pass_ms(mode, seg) >= p.roofline(mode).pass_cost(seg).roofline_ms


def test_extrapolation_flag(fitted):
    pm = fitted.profile.modes["diffusion"].pass_models["denoise_step"]
    assert pm.support["seqs"] == [1.0, 64.0]
    assert not pm.extrapolated(shape_of(Segment("denoise_step", 8, 256, 1024)))
    assert pm.extrapolated(shape_of(Segment("denoise_step", 256, 256, 1024)))  # larger batch than measured
    assert pm.extrapolated(shape_of(Segment("denoise_step", 8, 256, 32768)))  # longer context than measured


def test_heldout_specs(runs):
    assert HeldoutSpec.parse("seqs=64").match == {"seqs": 64}
    with pytest.raises(UserError, match="--heldout"):
        HeldoutSpec.parse("biggest")
    r = build_profile([runs["diffusion"]], FitOptions(heldout="context_tokens=2048"))
    assert "context_tokens=2048 left out" in r.fits["denoise_step"].heldout_desc
    assert r.fits["denoise_step"].model.diagnostics.heldout_mape_pct < 3.0
    r = build_profile([runs["diffusion"]], FitOptions(heldout="none", repeats="all"))
    assert r.fits["denoise_step"].model.diagnostics.heldout_mape_pct is None
    assert r.fits["denoise_step"].model.diagnostics.n_obs == 3 * r.fits["denoise_step"].n_shapes


def test_modes_are_omitted_or_filled_never_silently(runs):
    r = build_profile([runs["ar"]], FitOptions())
    assert set(r.profile.modes) == {"ar"}
    # no mode commits; the published prior's answer lengths per regime come along for the default workload, said once
    assert r.profile.commit_stats and [m for m in r.messages if m.startswith("commit statistics")] == [
        next(m for m in r.messages if "for the default workload's answer lengths" in m)]
    with pytest.raises(UserError, match="mode diffusion needs pass kinds"):
        build_profile([runs["ar"]], FitOptions(modes=["ar", "diffusion"]))
    r = build_profile([runs["ar"]], FitOptions(modes=["ar", "mtp"]))
    mtp = r.profile.modes["mtp"].pass_models
    assert mtp["verify_step"].provenance.kind == "projected" and "decode_step" in mtp["verify_step"].provenance.source
    assert mtp["draft_step"].provenance.kind == "roofline"
    assert {(m, k) for m, k, _ in r.filled} == {("mtp", "verify_step"), ("mtp", "draft_step")}
    assert "not timed" in r.profile.modes["mtp"].notes
    assert r.profile.mtp_acceptance.provenance.kind == "published"
    r = build_profile([runs["ar"]], FitOptions(modes=["ar", "diffusion"], fill_roofline=0.4))
    assert r.profile.modes["diffusion"].pass_models["denoise_step"].coef == {"roofline_ms": 2.5}
    assert r.profile.commit_stats["R1"].provenance.kind == "published"


def test_bad_inputs_are_user_errors(runs, tmp_path):
    with pytest.raises(UserError, match="not h100-sxm"):
        build_profile([runs["ar"]], FitOptions(hardware="h100-sxm"))
    with pytest.raises(UserError, match="not fp8"):
        build_profile([runs["ar"]], FitOptions(precision="fp8"))
    with pytest.raises(UserError, match="--time"):
        build_profile([runs["ar"]], FitOptions(time_column="cpu_ms"))
    with pytest.raises(UserError, match="does not exist"):
        build_profile([tmp_path / "nope"])
    with pytest.raises(UserError, match="--model MODE=NAME"):
        resolve_model("meta/llama-3", "run x")
    assert resolve_model("google/diffusiongemma-26B-A4B-it", "run x") == "diffusiongemma-26b-a4b"
    assert resolve_model("google/gemma-4-26B-A4B-it", "run x") == "gemma4-26b-a4b"
    with pytest.raises(UserError, match="no GPU runs"):
        campaign_runs(runs["ar"].parent, "h200")  # synthetic runs are never campaign runs
    # two engine setups timing one pass kind are refused
    other = write_synthetic_run(tmp_path / "ar2", "ar", {"prefill": AR_TRUTH["prefill"], "decode_step": {"const": 9.0, "roofline_ms": 1.0}},
                                seed=4, engine={"name": "eager"})
    with pytest.raises(UserError, match="differ in engine name"):
        build_profile([runs["ar"], other])
    r = build_profile([runs["ar"], other], FitOptions(engine="eager"))
    assert r.fits["decode_step"].model.coef["const"] == pytest.approx(9.0, rel=0.1)


def test_kv_reads_priced_apart_from_weights(tmp_path):
    """An engine whose MoE kernels stream weights at ~1/10 of the bandwidth while attention reads the
    KV cache near it (the pattern of the eager/compiled transformers paths): kv_ms lets the fit hold
    the 5% held-out target where one memory coefficient cannot."""
    import numpy as np

    from costmodel.hardware import get_hardware
    from costmodel.models import get_model
    from costmodel.precision import get_precision
    from costmodel.roofline import Roofline
    from costmodel.schemas.rundir import RunManifest, RunWriter

    roof = Roofline(get_model("gemma4-26b-a4b"), get_hardware("h200"), get_precision("bf16"))
    rng = np.random.default_rng(0)
    man = RunManifest(run_id="moe", kind="gpu", mode="ar", model="gemma4-26b-a4b", weights="random", commit_source="none",
                      hardware="h200", engine={"name": "test"})
    with RunWriter(tmp_path / "moe", man) as w:
        for s in (1, 2, 4, 8, 16, 32, 64, 128):
            for c in (512, 2048, 8192):
                r = roof.pass_cost(Segment("decode_step", s, 1, c))
                ms = 2 + 0.8 * r.experts_touched_per_layer + 3 * r.compute_ms + 0.5 * r.kv_read_bytes / 4.8e9
                w.add("passes", [{"pass_kind": "decode_step", "seqs": s, "tokens_per_seq": 1, "context_tokens": c,
                                  "gpu_ms": ms * float(np.exp(rng.normal(0, 0.02))), "wall_ms": ms} for _ in range(3)])
            for t in (256, 1024):
                r = roof.pass_cost(Segment("prefill", s, t, 0))
                w.add("passes", {"pass_kind": "prefill", "seqs": s, "tokens_per_seq": t, "context_tokens": 0,
                                 "gpu_ms": 5 + 1.2 * r.memory_ms + 1.6 * r.compute_ms, "wall_ms": 1.0})
        w.finish_unit("all")
    f = build_profile([tmp_path / "moe"], FitOptions()).fits["decode_step"]
    assert "kv_ms" in f.features and f.model.coef["kv_ms"] < 0 <= f.model.coef["kv_ms"] + f.model.coef["memory_ms"]
    assert f.model.diagnostics.heldout_mape_pct < 5.0
    assert f.candidates["const + roofline_ms"] > 5.0  # one efficiency for every byte does not fit this engine


def test_harness_shaped_rows(tmp_path):
    """Rows as the GPU harness writes them: extra columns, an engine column per row, NaN roofline
    annotations when it ran on an unknown GPU, a manifest without a catalog hardware id."""
    import numpy as np

    from measure.fit.synthetic_runs import truth_ms
    from costmodel.schemas.rundir import RunManifest, RunWriter

    man = RunManifest(run_id="gpu-ar-x", kind="gpu", mode="ar", model="google/gemma-4-26B-A4B-it", weights="random",
                      commit_source="none", hardware=None, gpu_name="NVIDIA H200",
                      engine={"name": "transformers", "engine": "eager", "models": {"target": "x"}})
    from costmodel.hardware import get_hardware
    from costmodel.models import get_model
    from costmodel.precision import get_precision
    from costmodel.roofline import Roofline

    roof = Roofline(get_model("gemma4-26b-a4b"), get_hardware("h200"), get_precision("bf16"))
    with RunWriter(tmp_path / "r", man) as w:
        for engine, k in (("eager", 2.0), ("compiled", 1.0)):
            for s in (1, 4, 16, 64):
                for kind, t, c in (("decode_step", 1, 1024), ("decode_step", 1, 4096), ("prefill", 512, 0), ("prefill", 2048, 0)):
                    ms = k * truth_ms(roof, kind, (s, t, c), {"const": 2.0, "memory_ms": 1.5, "compute_ms": 1.5})
                    w.add("passes", [{"pass_kind": kind, "seqs": s, "tokens_per_seq": t, "context_tokens": c, "gpu_ms": ms, "wall_ms": ms + 1,
                                      "forward_gpu_ms": ms, "engine": engine, "cache": "dynamic", "warmup": rep == 0, "rep": rep,
                                      "roofline_ms": np.nan, "x_roofline": np.nan, "cell": f"B{s}"} for rep in range(3)])
        w.finish_unit("all")
    with pytest.raises(UserError, match="does not record its GPU"):
        build_profile([tmp_path / "r"])
    with pytest.raises(UserError, match="different engines \\(compiled, eager\\)"):
        build_profile([tmp_path / "r"], FitOptions(hardware="h200"))
    r = build_profile([tmp_path / "r"], FitOptions(hardware="h200", engine="compiled"))
    assert r.fits["decode_step"].model.coef == pytest.approx({"const": 2.0, "memory_ms": 1.5, "compute_ms": 1.5}, rel=1e-6)
    assert r.profile.modes["ar"].model == "gemma4-26b-a4b" and r.profile.engine["selected"] == "compiled"
    assert "NVIDIA H200" in r.fits["prefill"].model.provenance.notes


def test_unidentified_terms_are_not_fitted():
    """One batch size over a few context lengths pins down only a multiple of the roofline, and an
    intercept beside a memory term that barely varies (prefill: the same weights every shape) is
    refused, so a projection to another GPU cannot amplify noise."""
    import numpy as np
    import pandas as pd

    from measure.fit.passes import fit_pass_kind
    from costmodel.hardware import get_hardware
    from costmodel.models import get_model
    from costmodel.precision import get_precision
    from costmodel.schemas.profile import Provenance
    from costmodel.roofline import Roofline

    roof = Roofline(get_model("gemma4-26b-a4b"), get_hardware("h200"), get_precision("bf16"))
    rng = np.random.default_rng(1)
    rows = pd.DataFrame([{"seqs": 1, "tokens_per_seq": 1, "context_tokens": c, "ms": 9.9 * np.exp(rng.normal(0, 0.01))}
                         for c in range(1024, 1040)])
    f = fit_pass_kind(rows, "decode_step", roof, Provenance("measured", "test"))
    assert f.features == ("roofline_ms",)
    rows = pd.DataFrame([{"seqs": s, "tokens_per_seq": t, "context_tokens": 0,
                          "ms": (2.0 + 2.0 * r.memory_ms + 1.5 * r.compute_ms) * np.exp(rng.normal(0, 0.02))}
                         for s in (1, 2, 4, 8) for t in (256, 512, 1024, 2048) for r in [roof.pass_cost(Segment("prefill", s, t, 0))]])
    f = fit_pass_kind(rows, "prefill", roof, Provenance("measured", "test"))
    assert "const" not in f.features or f.model.coef["const"] > 0
    assert f.candidates["const + memory_ms + compute_ms"] is None  # its intercept is not identified
    assert f.model.diagnostics.heldout_mape_pct < 5.0
