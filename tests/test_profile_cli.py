"""`costmodel fit` and `costmodel profile show|validate|project|roofline` through the CLI, in-process;
projection follows the roofline ratio and refuses weights that do not fit."""

import json

import pytest

from measure.fit.projection import project_profile
from measure.fit.synthetic_runs import write_synthetic_run
from costmodel.schemas.profile import Profile
from costmodel.roofline import Segment

TRUTH = {
    "diffusion": {"denoise_step": {"const": 1.2, "roofline_ms": 3.1}, "encoder_prefill": {"const": 2.0, "memory_ms": 2.0, "compute_ms": 1.5},
                  "encoder_commit": {"const": 1.0, "memory_ms": 2.5, "compute_ms": 1.2}},
    "ar": {"prefill": {"const": 2.0, "memory_ms": 2.0, "compute_ms": 1.5}, "decode_step": {"const": 3.0, "memory_ms": 1.6, "compute_ms": 2.0}},
}


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    """A profile fitted through `costmodel fit` from synthetic H200 runs, all three modes."""
    from costmodel.cli import main

    root = tmp_path_factory.mktemp("prof")
    runs = [str(write_synthetic_run(root / m, m, TRUTH[m], seed=i)) for i, m in enumerate(TRUTH)]
    out = root / "h200.json"
    assert main(["fit", *runs, "--modes", "diffusion,ar,mtp", "-o", str(out)]) == 0
    return out


def test_fit_cli_prints_the_statsmodels_backed_summary(tmp_path, cli):
    run = write_synthetic_run(tmp_path / "ar", "ar", TRUTH["ar"])
    code, out, err = cli("fit", str(run), "-o", str(tmp_path / "p.json"), "--show-summaries")
    assert code == 0, err
    for needle in ("k-fold MAPE", "held-out MAPE", "median x roofline", "decode_step", "seqs=256 left out", "within the 5% target",
                   "statsmodels WLS", "P>|t|", "wrote"):
        assert needle in out, needle
    assert Profile.load(tmp_path / "p.json").modes.keys() == {"ar"}
    code, out, err = cli("fit", str(run), "-o", str(tmp_path / "q.json"), "--commit-runs", str(run))
    assert code == 2 and "--commit-runs was given but the profile has no diffusion mode" in err
    code, out, err = cli("fit", "-o", str(tmp_path / "q.json"))
    assert code == 2 and "no run directories" in err


def test_show_and_validate(h200, cli):
    code, out, err = cli("profile", "validate", str(h200))
    assert code == 0 and out.startswith("OK ") and "modes diffusion, ar, mtp" in out
    code, out, err = cli("profile", "show", str(h200))
    assert code == 0, err
    for needle in ("mode diffusion", "mode mtp", "denoise_step: measured", "verify_step: projected", "draft_step: roofline",
                   "R1: published", "arXiv 2606.14620", "MTP acceptance: k=4", "SYNTHETIC"):
        assert needle in out, needle


def test_projection_scales_with_the_roofline_ratio(h200):
    src = Profile.load(h200)
    dst = project_profile(src, "h100-sxm", "bf16")
    # a memory-bound pass: its linear terms scale by the bandwidth ratio 4.8 / 3.35 (compute 989.5 vs 989: ~1)
    seg = (Segment("decode_step", 1, 1, 1024),)
    const = src.modes["ar"].pass_models["decode_step"].coef["const"]
    assert dst.modes["ar"].pass_models["decode_step"].coef["const"] == const  # overhead carried as is
    ratio = (dst.pass_ms("ar", seg) - const) / (src.pass_ms("ar", seg) - const)
    assert ratio == pytest.approx(4.8 / 3.35, rel=0.02)
    assert dst.roofline("ar").pass_cost(seg).memory_ms / src.roofline("ar").pass_cost(seg).memory_ms == pytest.approx(4.8 / 3.35)
    pm = dst.modes["diffusion"].pass_models["denoise_step"]
    assert pm.provenance.kind == "projected" and src.profile_id in pm.provenance.source
    assert dst.provenance.kind == "projected" and dst.hardware.id == "h100-sxm"
    assert dst.commit_stats["R1"].provenance.kind == "published"
    assert pm.diagnostics.summary.startswith("diagnostics of the source fit on h200/bf16")


def test_project_cli_5090_needs_4bit_weights(h200, tmp_path, cli):
    out = tmp_path / "5090.json"
    code, o, err = cli("profile", "project", str(h200), "--hardware", "rtx-5090", "--precision", "bf16", "-o", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "RTX 5090's 32 GB" in err and "--precision int4" in err and not out.exists()
    code, o, err = cli("profile", "project", str(h200), "--hardware", "rtx-5090", "--precision", "fp8", "-o", str(out))
    assert code == 2 and "--precision int4" in err
    code, o, err = cli("profile", "project", str(h200), "--hardware", "rtx-5090", "--precision", "int4", "-o", str(out))
    assert code == 0, err
    p = Profile.load(out)
    assert p.precision == "int4" and any("cannot hold the 25.2B-parameter model in bf16 (50.5 GB" in n for n in p.notes)
    assert any("4-bit" in n for n in p.notes) and any("const (per-pass overhead) carried as is" in n for n in p.notes)
    code, o, err = cli("profile", "project", str(h200), "--hardware", "h100-sxm", "--precision", "nvfp4", "-o", str(out))
    assert code == 2 and "no fp4 tensor rate" in err


def test_profile_roofline_cli(tmp_path, cli):
    out = tmp_path / "r.json"
    code, o, err = cli("profile", "roofline", "--hardware", "h100-sxm", "--precision", "bf16", "--efficiency", "0.5", "-o", str(out))
    assert code == 0, err
    p = Profile.load(out)
    assert p.provenance.kind == "roofline" and p.modes["ar"].pass_models["decode_step"].coef == {"roofline_ms": 2.0}
    code, o, err = cli("profile", "roofline", "--hardware", "rtx-5090", "--precision", "bf16", "-o", str(out))
    assert code == 2 and "--precision int4" in err
    code, o, err = cli("profile", "roofline", "--hardware", "h200", "--efficiency", "2", "-o", str(out))
    assert code == 2 and "--efficiency 2 is above its bound of 1" in err
    code, o, err = cli("profile", "roofline", "--hardware", "h200", "--efficiency", "1e-300", "-o", str(out))
    assert code == 2 and "--efficiency 1e-300 is below its bound of 0.001" in err and not out.exists() or out.stat().st_size > 0


def test_bad_profiles_are_one_line_errors(h200, tmp_path, cli):
    good = json.loads(h200.read_text())
    cases = {
        "malformed": ("{not json", "not valid JSON"),
        "missing": (json.dumps({k: v for k, v in good.items() if k != "hardware"}), "not a valid costmodel profile"),
        "schema": (json.dumps({**good, "schema_version": 7}), "schema_version 7"),
        "nomtp": (json.dumps({**good, "mtp_acceptance": None}), "mode mtp needs mtp_acceptance"),
        "empty": ("[]", "not a valid costmodel profile"),
    }
    for name, (text, needle) in cases.items():
        f = tmp_path / f"{name}.json"
        f.write_text(text)
        for sub in ("validate", "show"):
            code, out, err = cli("profile", sub, str(f))
            assert code == 2, (name, sub)
            assert needle in err and len(err.strip().splitlines()) == 1, (name, sub, err)
        code, out, err = cli("profile", "project", str(f), "--hardware", "h100-sxm", "--precision", "bf16", "-o", str(tmp_path / "o.json"))
        assert code == 2 and needle in err
    code, out, err = cli("profile", "validate", str(tmp_path / "absent.json"))
    assert code == 2 and "does not exist" in err


def test_shipped_profiles_are_consistent():
    """The shipped defaults (scripts/build_engine_profiles.sh): H100 and H200 are real vLLM 0.26 in fp8,
    fitted on its recorded steps at load (data/runs/engine); the RTX 5090 is their projection in NVFP4.
    The per-operator profiles (ops/), transformers-engine and eager ones stay available as what-ifs."""
    from pathlib import Path

    from costmodel.schemas.profile import Profile
    from costmodel.shipped import default_profile, shipped_profiles

    shipped = shipped_profiles()
    assert set(shipped) == {"h200", "h100-sxm", "rtx-5090"}
    for hw in ("h200", "h100-sxm"):
        p = default_profile(hw)
        assert p.precision == "fp8" and p.engine.get("name") == "vllm" and p.provenance.kind == "measured"
        assert set(p.modes) == {"diffusion", "ar", "mtp"} and p.commit_stats and p.mtp_acceptance
    r = default_profile("rtx-5090")
    assert r.precision == "nvfp4" and r.provenance.kind == "projected"
    assert all(pm.provenance.kind == "projected" for m in r.modes.values() for pm in m.pass_models.values())
    root = Path(shipped["h200"]).parent
    for other in ("ops/h200-fp8.json", "ops/h100-sxm-fp8.json", "ops/h200-bf16.json", "ops/h100-sxm-bf16.json", "ops/rtx-5090-int4.json",
                  "transformers/h200.json", "eager/h200.json"):
        Profile.load(root / other).validate()


def test_shipped_ops_profiles_project_point_by_point():
    # table pass models (composed per operator) move to another GPU grid point by grid point: each
    # value's time less the per-step overhead x the roofline ratio of its shape; their linear
    # fallbacks (an intercept under a steep slope) would have predicted below the roofline there
    from costmodel.shipped import shipped_dir, shipped_profiles

    shipped = shipped_profiles()
    src = Profile.load(shipped_dir() / "ops" / "h200-bf16.json")  # the per-operator what-if
    dst = project_profile(src, "h100-sxm", "bf16")
    pm_src, pm_dst = src.modes["diffusion"].pass_models["denoise_step"], dst.modes["diffusion"].pass_models["denoise_step"]
    t_src, t_dst = pm_src.table, pm_dst.table
    assert (t_dst.hardware, t_dst.precision) == ("h100-sxm", "bf16") and "projected from h200-bf16" in t_dst.source
    i, j, k = 0, len(t_src.tokens_per_seq) - 1, 3
    seg = Segment("denoise_step", int(t_src.seqs[i]), int(t_src.tokens_per_seq[j]), int(t_src.context_tokens[k]))
    ratio = dst.roofline("diffusion").pass_cost(seg).roofline_ms / src.roofline("diffusion").pass_cost(seg).roofline_ms
    oh = t_src.overhead_ms
    assert t_dst.ms[i][j][k] == pytest.approx((t_src.ms[i][j][k] - oh) * ratio + oh)
    assert dst.pass_ms("diffusion", (seg,)) == pytest.approx(t_dst.ms[i][j][k], rel=1e-6)
    assert "roofline ratio" in pm_dst.provenance.notes
    # off the table's GPU the fallback is the source's median ratio to the roofline, never below it
    assert pm_dst.coef == {"roofline_ms": pytest.approx(max(1.0, pm_src.median_x_roofline))}
    # every shipped default projects, and the projection is a valid profile
    h100 = Profile.load(shipped["h100-sxm"])
    for p in (dst, project_profile(h100, "rtx-5090", "int4"), project_profile(h100, "h200", "fp8")):
        Profile.from_dict(p.to_dict()).validate()


def test_project_compare_prints_the_projections_error(cli, tmp_path):
    from costmodel.shipped import shipped_profiles

    shipped = shipped_profiles()
    out = tmp_path / "p.json"
    code, o, err = cli("profile", "project", str(shipped["h200"]), "--hardware", "h100-sxm", "--precision", "fp8",
                       "-o", str(out), "--compare", str(shipped["h100-sxm"]))
    assert code == 0, err
    assert "projection vs" in o and "denoise_step" in o and "decode_step" in o and out.exists()
    # a profile of another GPU is refused in one line, and nothing is written
    out2 = tmp_path / "q.json"
    code, o, err = cli("profile", "project", str(shipped["h200"]), "--hardware", "h100-sxm", "--precision", "fp8",
                       "-o", str(out2), "--compare", str(shipped["h200"]))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is for h200/fp8" in err and not out2.exists()
